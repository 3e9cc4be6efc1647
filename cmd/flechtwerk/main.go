// Command flechtwerk operates Flechtwerk applications on a Kafka cluster:
//
//	flechtwerk describe APP
//	flechtwerk reset APP [--to earliest|latest|RFC3339] [--input T,...] [--state] [--yes] [--dry-run]
//	flechtwerk state get APP KEY [--partition N] [--hex]
//
// Every command takes --brokers (default $KAFKA_BROKERS, else
// localhost:9092), --json and --timeout. Exit codes: 0 ok, 1 error, 2 usage.
//
// Install with:
//
//	go install github.com/flechtwerk/flechtwerk/cmd/flechtwerk@latest
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/flechtwerk/flechtwerk/internal/admin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := admin.Run(ctx, os.Args[1:], admin.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
