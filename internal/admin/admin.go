package admin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Exit codes of Run.
const (
	ExitOK    = 0 // the command did what it was asked
	ExitError = 1 // the command failed (broker, topic, group or state error)
	ExitUsage = 2 // the command line is wrong
)

// DefaultBrokers is the broker list when neither --brokers nor
// $KAFKA_BROKERS is set.
const DefaultBrokers = "localhost:9092"

const usage = `flechtwerk — operate Flechtwerk applications

Usage:
  flechtwerk describe APP              members, tasks, lag, changelog size, transactions
  flechtwerk reset APP [--to earliest|latest|RFC3339] [--input T,...] [--state] [--yes] [--dry-run]
  flechtwerk state get APP KEY [--partition N] [--hex]

Secrets (no broker; see docs/security.md):
  flechtwerk keyring create FILE --kid K [--type oct|x25519] [--scope S]... [--protect] [--force]
  flechtwerk keyring add FILE --kid K [--type oct|x25519|ed25519] [--scope S]...
                     [--primary] [--primary-for S]... [--signing-for S]...
  flechtwerk keyring rotate FILE --kid K [--type oct|x25519|ed25519] [--scope S]...
  flechtwerk keyring primary|signing FILE KID [--scope S]
  flechtwerk keyring remove|export FILE KID
  flechtwerk keyring show|protect FILE
  flechtwerk seal|sign --keyring FILE [--scope S] [--string] [--in PATH | --env VAR]   (else stdin)
  flechtwerk open|verify|reseal --keyring FILE [--scope S] [--string] [TOKEN | --in PATH | --env VAR]
  Keyring password: --password-file PATH or --password-env VAR.

Common flags (before or after the arguments):
  --brokers host:port,...  seed brokers (default $KAFKA_BROKERS, else localhost:9092)
  --json                   machine-readable output
  --timeout D              deadline for the whole command (default 30s)

TLS and SASL are not supported yet.
Exit codes: 0 ok, 1 error, 2 usage.
`

// Env is what a command reads and writes besides Kafka.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv looks up environment variables (KAFKA_BROKERS); nil means
	// os.Getenv.
	Getenv func(string) string
}

// usageError is a wrong command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// Run runs the command line args (without the program name) and returns
// its exit code. Errors go to env.Stderr, results to env.Stdout.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	err := run(ctx, args, env)
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(env.Stdout, usage)
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(env.Stderr, "flechtwerk: %s\n\n%s", ue.msg, usage)
		return ExitUsage
	default:
		fmt.Fprintf(env.Stderr, "flechtwerk: %v\n", err)
		return ExitError
	}
}

func run(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		return usagef("no command given")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "describe":
		return describeCmd(ctx, rest, env)
	case "reset":
		return resetCmd(ctx, rest, env)
	case "state":
		if len(rest) == 0 || rest[0] != "get" {
			return usagef("state: want \"state get APP KEY\"")
		}
		return stateGetCmd(ctx, rest[1:], env)
	case "keyring":
		return keyringCmd(rest, env)
	case "seal", "open", "sign", "verify", "reseal":
		return valueCmd(cmd, rest, env)
	case "help", "-h", "-help", "--help":
		return flag.ErrHelp
	default:
		return usagef("unknown command %q", cmd)
	}
}

// common are the flags every command takes.
type common struct {
	brokers string
	json    bool
	timeout time.Duration
}

func newFlags(name string, env Env, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	brokers := env.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		brokers = DefaultBrokers
	}
	fs.StringVar(&c.brokers, "brokers", brokers, "seed brokers")
	fs.BoolVar(&c.json, "json", false, "JSON output")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of the command")
	return fs
}

// parse parses flags anywhere among the arguments and returns the
// positional arguments; want is their exact count.
func parse(fs *flag.FlagSet, args []string, want int, names string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != want {
		return nil, usagef("%s: want %s, got %d argument(s) %q", fs.Name(), names, len(pos), pos)
	}
	for i, p := range pos {
		if p == "" {
			return nil, usagef("%s: argument %d is empty", fs.Name(), i+1)
		}
	}
	return pos, nil
}

// connect returns an admin client on c.brokers.
func (c *common) connect() (*kadm.Client, func(), error) {
	opts, err := c.opts()
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("client for brokers %s: %w", c.brokers, err)
	}
	return kadm.NewClient(cl), cl.Close, nil
}

// opts are the client options for c.brokers.
func (c *common) opts() ([]kgo.Opt, error) {
	seeds := splitList(c.brokers)
	if len(seeds) == 0 {
		return nil, usagef("--brokers is empty")
	}
	return []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID("flechtwerk-admin")}, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// isOpen reports whether a transaction state means a transaction is in
// flight (its records are not yet visible to read_committed readers, or
// its markers are not yet written).
func isOpen(state string) bool {
	switch state {
	case "Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence":
		return true
	}
	return false
}
