package admin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
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

// commands are the lines of the global usage, one per command.
const commands = `  flechtwerk describe APP [flags]        members, tasks, lag, changelog size, transactions
  flechtwerk reset APP [flags]           reset a stopped application's input offsets (and state)
  flechtwerk state get APP KEY [flags]   a key's committed state, read from its changelog
  flechtwerk state timers APP KEY        a key's pending timers and its task's stream time
  flechtwerk --version                   the version of this build

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
`

// verbUsage is the --help text of each command above its flags.
var verbUsage = map[string]string{
	"describe": `Usage: flechtwerk describe APP [flags]

Describes application APP: its group's members and the tasks each holds,
the lag of each input partition, the changelog's offsets and size, and the
transactions of its transactional IDs APP-N.
`,
	"reset": `Usage: flechtwerk reset APP [flags]

Resets the input offsets of application APP after every instance stopped,
like Kafka's consumer-group and Streams reset tools. It prints the plan
and asks for confirmation unless --yes. Exactly one target: --to (default
earliest), --to-offset, --shift-by or --by-duration.

Moving offsets back while keeping state replays records onto state that
already counts them: reset refuses unless --state (delete the state,
rebuild it from the replayed inputs) or --keep-state (replay onto it).
`,
	"state get": `Usage: flechtwerk state get APP KEY [flags]

Prints the committed state of KEY in application APP, read from its
changelog partition up to the last stable offset (exit 1 if absent).
--store NAME reads a named store of APP instead, from its changelog
{APP}-{NAME}-changelog; describe APP lists the stores.
`,
	"state timers": `Usage: flechtwerk state timers APP KEY [flags]

Lists the pending timers of state key KEY in application APP (TTL timers
shown as "(ttl)" or "(ttl:STORE)") and its task's stream time, read from
the timer store's changelog {APP}-timers-changelog up to the last stable
offset.
`,
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "flechtwerk — operate Flechtwerk applications\n\nUsage:\n%s\n", commands)
	fmt.Fprint(w, "Run \"flechtwerk COMMAND --help\" for a command's flags.\n\nFlags of every Kafka command:\n")
	var c common
	printFlags(w, newFlags("", Env{Getenv: func(string) string { return "" }}, &c), func(name string) bool { return connFlag(name) || name == "json" || name == "timeout" })
	fmt.Fprint(w, "\nSecrets are read from files or the environment, never from the command line.\nExit codes: 0 ok, 1 error, 2 usage.\n")
}

// printVerbUsage prints the --help of the command whose flags are fs.
func printVerbUsage(w io.Writer, fs *flag.FlagSet) {
	text, ok := verbUsage[fs.Name()]
	if !ok {
		text = "Usage: flechtwerk " + fs.Name() + " [flags]\n"
	}
	fmt.Fprint(w, text)
	fmt.Fprint(w, "\nFlags:\n")
	printFlags(w, fs, func(name string) bool { return !connFlag(name) })
	fmt.Fprint(w, "\nConnection flags:\n")
	printFlags(w, fs, connFlag)
}

// printFlags prints the flags of fs that keep selects, in GNU style.
func printFlags(w io.Writer, fs *flag.FlagSet, keep func(string) bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if !keep(f.Name) {
			return
		}
		arg, help := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if arg != "" && !isBool(f) {
			name += " " + arg
		}
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "0s" && d != "-1" && !strings.Contains(help, "default") {
			help += " (default " + d + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, help)
	})
	tw.Flush()
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Env is what a command reads and writes besides Kafka.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv looks up environment variables (KAFKA_BROKERS,
	// FLECHTWERK_SASL_*); nil means os.Getenv.
	Getenv func(string) string
}

// usageError is a wrong command line: exit code 2. fs is the flag set of
// the command whose line is wrong, if it got that far; verb its name.
type usageError struct {
	msg  string
	fs   *flag.FlagSet
	verb string
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// helpRequest is --help given to a command.
type helpRequest struct{ fs *flag.FlagSet }

func (h *helpRequest) Error() string { return "help requested" }

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
	var (
		ue *usageError
		hr *helpRequest
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &hr):
		printVerbUsage(env.Stdout, hr.fs)
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		printUsage(env.Stdout)
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(env.Stderr, "flechtwerk: %s\n\n", ue.msg)
		switch {
		case ue.fs != nil:
			printVerbUsage(env.Stderr, ue.fs)
		case ue.verb != "":
			fmt.Fprintf(env.Stderr, "Usage: see \"flechtwerk %s --help\".\n", ue.verb)
		default:
			printUsage(env.Stderr)
		}
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
	var (
		err  error
		verb = args[0]
	)
	switch cmd, rest := args[0], args[1:]; cmd {
	case "describe":
		err = describeCmd(ctx, rest, env)
	case "reset":
		err = resetCmd(ctx, rest, env)
	case "state":
		switch {
		case len(rest) > 0 && rest[0] == "get":
			verb = "state get"
			err = stateGetCmd(ctx, rest[1:], env)
		case len(rest) > 0 && rest[0] == "timers":
			verb = "state timers"
			err = stateTimersCmd(ctx, rest[1:], env)
		default:
			return usagef("state: want \"state get APP KEY\" or \"state timers APP KEY\"")
		}
	case "keyring":
		err = keyringCmd(rest, env)
	case "seal", "open", "sign", "verify", "reseal":
		err = valueCmd(cmd, rest, env)
	case "version", "-version", "--version":
		_, err = fmt.Fprintln(env.Stdout, "flechtwerk", Version())
	case "help", "-h", "-help", "--help":
		return flag.ErrHelp
	default:
		return usagef("unknown command %q", cmd)
	}
	if ue := (*usageError)(nil); errors.As(err, &ue) && ue.verb == "" {
		ue.verb = verb
	}
	return err
}

// common are the flags every command that talks to Kafka takes: the
// connection flags, --json and --timeout.
type common struct {
	conn
	json    bool
	timeout time.Duration
}

// newFlags returns the flag set of command name with the common flags.
func newFlags(name string, env Env, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.register(fs, env)
	fs.BoolVar(&c.json, "json", false, "machine-readable output")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline `D` of the whole command")
	return fs
}

// parse parses flags anywhere among the arguments and returns the
// positional arguments; want is their exact count. -h or --help anywhere
// asks for the command's help.
func parse(fs *flag.FlagSet, args []string, want int, names string) ([]string, error) {
	var pos, after []string
	if i := slices.Index(args, "--"); i >= 0 { // the rest are arguments
		args, after = args[:i], args[i+1:]
	}
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpRequest{fs: fs}
			}
			return nil, &usageError{msg: fmt.Sprintf("%s: %v", fs.Name(), err), fs: fs}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	pos = append(pos, after...)
	if len(pos) != want {
		return nil, &usageError{msg: fmt.Sprintf("%s: want %s, got %d argument(s) %q", fs.Name(), names, len(pos), pos), fs: fs}
	}
	for i, p := range pos {
		if p == "" {
			return nil, &usageError{msg: fmt.Sprintf("%s: argument %d is empty", fs.Name(), i+1), fs: fs}
		}
	}
	return pos, nil
}

// connect returns an admin client on the connection flags.
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

// opts are the client options of the connection flags.
func (c *common) opts() ([]kgo.Opt, error) { return c.clientOpts() }

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
