package runner_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// kindsPreamble starts every program of TestOptionKindsCompile: a stage
// (the constructors take any runner.Stage; its kind is checked at run
// time) and the imports the programs use.
const kindsPreamble = `package main

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/flechtwerk/flechtwerk/runner"
)

type stage struct{}

func (stage) Validate() error { return nil }

var (
	_ = slog.Default
	_ = time.Second
	_ = prometheus.NewRegistry
	_ = kgo.ClientID
	_ propagation.TraceContext
	_ = noop.NewTracerProvider
)
`

// kindsOK gives every constructor every option of its kind, and builds
// option slices of each kind from the options shared by several kinds.
const kindsOK = `
func main() {
	var s stage
	retry := runner.RetryPolicy{Transient: func(error) bool { return true }, MaxAttempts: 3}
	common := []runner.Opt{runner.SeedBrokers("b"), runner.ApplicationID("a"), runner.WithKafkaOpts(),
		runner.WithLogger(slog.Default()), runner.Metrics(prometheus.NewRegistry())}

	t := []runner.TransformerOpt{runner.InputTopics("in"), runner.MaxPollRecords(1), runner.InvalidRecords(runner.Skip),
		runner.StateDir("d"), runner.StoreRetention(time.Hour), runner.ChangelogReplicationFactor(3),
		runner.TransactionTimeout(time.Minute), runner.Concurrency(1), runner.SessionTimeout(time.Second),
		runner.WithConsumerOpts(kgo.ClientID("c")), runner.BatchTimeout(time.Second), runner.TaskTimeout(time.Minute),
		runner.CommitInterval(time.Second), runner.CommitMaxRecords(1), runner.CommitMaxBytes(1), runner.StandbyReplicas(1),
		runner.MaxTimersPerBatch(1), runner.AdvertisedAddress("h:1"), runner.WithTracerProvider(noop.NewTracerProvider()),
		runner.WithPropagator(propagation.TraceContext{})}
	for _, o := range common {
		t = append(t, o)
	}
	_, _ = runner.NewTransformer(s, t...)

	x := []runner.ExtractorOpt{runner.ConfigTopics("cfg"), runner.PollInterval(time.Second), runner.PageTimeout(time.Second),
		runner.TombstonedCursors(runner.KeepCursors), runner.PollRetry(retry), runner.QuarantineFailingConfigs(0),
		runner.StateDir("d"), runner.StoreRetention(time.Hour), runner.ChangelogReplicationFactor(3),
		runner.TransactionTimeout(time.Minute), runner.Concurrency(1), runner.SessionTimeout(time.Second),
		runner.WithConsumerOpts()}
	for _, o := range common {
		x = append(x, o)
	}
	_, _ = runner.NewExtractor(s, x...)

	_, _ = runner.NewSink(s, runner.SeedBrokers("b"), runner.ApplicationID("a"), runner.InputTopics("in"),
		runner.MaxPollRecords(1), runner.InvalidRecords(runner.DeadLetter("dl")), runner.Concurrency(1),
		runner.SessionTimeout(time.Second), runner.WithConsumerOpts(), runner.CommitKeepalive(time.Minute),
		runner.AutoCommitInterval(time.Second), runner.SinkRetry(retry), runner.WithKafkaOpts(),
		runner.WithLogger(slog.Default()), runner.Metrics(prometheus.NewRegistry()))

	_, _ = runner.NewBridge(s, runner.SeedBrokers("b"), runner.ApplicationID("a"), runner.ConfigTopics("cfg"),
		runner.TransactionTimeout(time.Minute), runner.WithKafkaOpts(), runner.WithLogger(slog.Default()),
		runner.Metrics(prometheus.NewRegistry()))
}
`

// kindsBad are programs that give an option to a constructor of a kind it
// does not apply to, each with the type error the compiler must report.
var kindsBad = []struct {
	name, body, want string
}{
	{"transformer option to NewExtractor",
		`_, _ = runner.NewExtractor(stage{}, runner.ConfigTopics("cfg"), runner.InputTopics("in"))`,
		"runner.InputOpt does not implement runner.ExtractorOpt (missing method extractorOpt)"},
	{"extractor option to NewTransformer",
		`_, _ = runner.NewTransformer(stage{}, runner.InputTopics("in"), runner.PollInterval(time.Second))`,
		"runner.ExtractorOpt does not implement runner.TransformerOpt (missing method transformerOpt)"},
	{"transformer-only option to NewSink",
		`_, _ = runner.NewSink(stage{}, runner.InputTopics("in"), runner.BatchTimeout(time.Second))`,
		"runner.TransformerOpt does not implement runner.SinkOpt (missing method sinkOpt)"},
	{"tracing to NewExtractor",
		`_, _ = runner.NewExtractor(stage{}, runner.WithTracerProvider(noop.NewTracerProvider()))`,
		"runner.TransformerOpt does not implement runner.ExtractorOpt (missing method extractorOpt)"},
	{"sink option to NewTransformer",
		`_, _ = runner.NewTransformer(stage{}, runner.CommitKeepalive(time.Minute))`,
		"runner.SinkOpt does not implement runner.TransformerOpt (missing method transformerOpt)"},
	{"extractor retry to NewSink",
		`_, _ = runner.NewSink(stage{}, runner.PollRetry(runner.RetryPolicy{}))`,
		"runner.ExtractorOpt does not implement runner.SinkOpt (missing method sinkOpt)"},
	{"group option to NewBridge",
		`_, _ = runner.NewBridge(stage{}, runner.SessionTimeout(time.Second))`,
		"runner.GroupOpt does not implement runner.BridgeOpt (missing method bridgeOpt)"},
	{"store option to NewSink",
		`_, _ = runner.NewSink(stage{}, runner.StateDir("d"))`,
		"runner.StoreOpt does not implement runner.SinkOpt (missing method sinkOpt)"},
	{"config topics to NewTransformer",
		`_, _ = runner.NewTransformer(stage{}, runner.ConfigTopics("cfg"))`,
		"runner.ConfigTopicOpt does not implement runner.TransformerOpt (missing method transformerOpt)"},
	{"transaction option to NewSink",
		`_, _ = runner.NewSink(stage{}, runner.TransactionTimeout(time.Minute))`,
		"runner.TxnOpt does not implement runner.SinkOpt (missing method sinkOpt)"},
	{"input option in a slice of extractor options",
		`_ = []runner.ExtractorOpt{runner.MaxPollRecords(1)}`,
		"runner.InputOpt does not implement runner.ExtractorOpt (missing method extractorOpt)"},
}

// TestOptionKindsCompile: an option of another stage kind does not compile
// (each program of kindsBad fails with its type error), while every option
// given to a constructor of its kinds does (kindsOK), so the check cannot
// pass by failing for another reason. The programs build in a temporary
// module that replaces the library with this tree, offline (GOPROXY=off,
// from the module cache).
func TestOptionKindsCompile(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to check that wrong-kind options do not compile: %v", err)
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(mod)
	require.NotNil(t, goLine, "no go directive in go.mod")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)

	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	write("go.mod", fmt.Sprintf("module kindcheck\n\n%s\n\nrequire github.com/flechtwerk/flechtwerk v0.0.0\n\nreplace github.com/flechtwerk/flechtwerk => %s\n", goLine, root))
	write("go.sum", string(sum))
	write("ok/main.go", kindsPreamble+kindsOK)
	for i, c := range kindsBad {
		write(fmt.Sprintf("bad%02d/main.go", i), kindsPreamble+"\nfunc main() {\n\t"+c.body+"\n}\n")
	}

	build := func(pkgs ...string) (string, error) {
		cmd := exec.Command(goBin, append([]string{"build", "-o", os.DevNull}, pkgs...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod -buildvcs=false")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := build("./ok")
	require.NoError(t, err, "the program with options of the right kinds must compile:\n%s", out)

	for i, c := range kindsBad {
		t.Run(c.name, func(t *testing.T) {
			pkg := fmt.Sprintf("./bad%02d", i)
			out, err := build(pkg)
			require.Error(t, err, "%s compiled:\n%s", c.body, out)
			require.Contains(t, out, c.want, "%s failed for another reason:\n%s", c.body, out)
			// The one error is the option's: the rest of the program is
			// sound.
			require.Equal(t, 1, strings.Count(out, "does not implement"), out)
		})
	}
}
