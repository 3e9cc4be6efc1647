// Command flechtwerk operates Flechtwerk applications on a Kafka cluster:
//
//	flechtwerk describe APP
//	flechtwerk reset APP [--to earliest|latest|RFC3339 | --to-offset N | --shift-by N | --by-duration D]
//		[--input T,...] [--state | --keep-state] [--yes] [--dry-run]
//	flechtwerk state get APP KEY [--partition N] [--hex]
//	flechtwerk keyring create|add|rotate|primary|signing|remove|export|show|protect FILE ...
//	flechtwerk seal|sign --keyring FILE [--scope S] [--string] [--in PATH | --env VAR]
//	flechtwerk open|verify|reseal --keyring FILE [--scope S] [--string] [TOKEN]
//	flechtwerk --version
//
// The Kafka commands take the connection flags (--brokers, default
// $KAFKA_BROKERS, else localhost:9092; --tls, --tls-ca, --tls-cert,
// --tls-key, --tls-server-name; --sasl-mechanism PLAIN|SCRAM-SHA-256|
// SCRAM-SHA-512, --sasl-username, --sasl-password-file or
// $FLECHTWERK_SASL_PASSWORD), --json and --timeout; "flechtwerk COMMAND
// --help" lists them. The keyring and value commands work on keyring files
// only (docs/security.md); a value to seal or sign is read from stdin, a
// file or an environment variable, never from the command line, and a
// keyring password from --password-file or --password-env. Exit codes: 0
// ok, 1 error, 2 usage. See docs/admin.md.
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
