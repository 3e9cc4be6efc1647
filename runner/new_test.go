package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/mqttbridge"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/sink"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// One stage of each kind, and a constructor of each kind taking the
// options every kind accepts.
var (
	newTr = transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil })
	newEx = extractor.New(func(context.Context, extractor.Config[struct{}], struct{}, *extractor.Emitter[struct{}]) error {
		return nil
	})
	newSk = sink.New[[]byte](&memSink{}, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce))
	newBr = mqttbridge.New(func(struct{}) string { return "t" },
		func(mqttbridge.Config[struct{}], mqttbridge.Message) (*mqttbridge.Output, error) { return nil, nil },
		mqttbridge.Broker("tcp://127.0.0.1:1"), mqttbridge.ClientID("c"))

	constructors = map[string]func(s runner.Stage, opts ...runner.Opt) (*runner.Runner, error){
		"NewTransformer": func(s runner.Stage, opts ...runner.Opt) (*runner.Runner, error) {
			return runner.NewTransformer(s, append(toKind[runner.TransformerOpt](opts), runner.InputTopics("in"))...)
		},
		"NewExtractor": func(s runner.Stage, opts ...runner.Opt) (*runner.Runner, error) {
			return runner.NewExtractor(s, append(toKind[runner.ExtractorOpt](opts), runner.ConfigTopics("cfg"), runner.PollInterval(time.Second))...)
		},
		"NewSink": func(s runner.Stage, opts ...runner.Opt) (*runner.Runner, error) {
			return runner.NewSink(s, append(toKind[runner.SinkOpt](opts), runner.InputTopics("in"))...)
		},
		"NewBridge": func(s runner.Stage, opts ...runner.Opt) (*runner.Runner, error) {
			return runner.NewBridge(s, append(toKind[runner.BridgeOpt](opts), runner.ConfigTopics("cfg"))...)
		},
	}
)

// toKind returns opts as options of kind O (every Opt is one).
func toKind[O any](opts []runner.Opt) []O {
	out := make([]O, 0, len(opts))
	for _, o := range opts {
		out = append(out, any(o).(O))
	}
	return out
}

// TestNewStageOfOtherKind: each constructor builds a runner of its own
// kind of stage, and refuses a stage of another kind with
// CodeWrongStageKind naming the constructor to use, together with every
// other problem (here a bad option value).
func TestNewStageOfOtherKind(t *testing.T) {
	stages := map[string]runner.Stage{"NewTransformer": newTr, "NewExtractor": newEx, "NewSink": newSk, "NewBridge": newBr}
	base := []runner.Opt{runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app")}
	for name, build := range constructors {
		for want, s := range stages {
			t.Run(name+"/"+want, func(t *testing.T) {
				_, err := build(s, base...)
				if want == name {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, flechtwerk.ErrWrongStageKind)
				require.ErrorContains(t, err, "given to "+name+": run it with runner."+want)

				_, err = build(s, runner.ApplicationID("app"))
				require.ErrorIs(t, err, flechtwerk.ErrWrongStageKind)
				require.ErrorIs(t, err, flechtwerk.ErrNoBrokers)
			})
		}
	}
}

// TestNewUnsupportedStage: a value that is no stage, or nil, is refused
// by every constructor with CodeInvalidTransformer.
func TestNewUnsupportedStage(t *testing.T) {
	base := []runner.Opt{runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app")}
	for name, build := range constructors {
		t.Run(name, func(t *testing.T) {
			_, err := build(notAStage{}, base...)
			require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
			require.ErrorContains(t, err, "runner_test.notAStage is not a stage a runner runs")
			require.NotErrorIs(t, err, flechtwerk.ErrWrongStageKind)
			_, err = build(nil, base...)
			require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
		})
	}
}

// wrapsNil embeds a nil transformer stage: the promoted methods would
// dereference it.
type wrapsNil struct{ *transformer.Stage[int] }

// TestNewUnbuiltStage: a stage type that its constructor did not build (a
// nil pointer, a zero value, a nil stage embedded in a user type) is a
// coded error from every constructor, not a panic.
func TestNewUnbuiltStage(t *testing.T) {
	base := []runner.Opt{runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app")}
	unbuilt := map[string]runner.Stage{
		"nil transformer":        (*transformer.Stage[int])(nil),
		"zero transformer":       &transformer.Stage[int]{},
		"nil extractor":          (*extractor.Stage[struct{}, int])(nil),
		"zero extractor":         &extractor.Stage[struct{}, int]{},
		"zero sink":              &sink.Stage[[]byte]{},
		"embedded nil stage":     wrapsNil{},
		"embedded nil stage ptr": &wrapsNil{},
	}
	for name, build := range constructors {
		for what, s := range unbuilt {
			t.Run(name+"/"+what, func(t *testing.T) {
				var err error
				require.NotPanics(t, func() { _, err = build(s, base...) })
				require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
				require.ErrorContains(t, err, "was not built by its constructor")
			})
		}
	}
}

// TestNewOptionValues: what only run time can check — values out of
// range, missing required options, options that contradict each other —
// is reported at once, each a coded *flechtwerk.ConfigError naming its
// option.
func TestNewOptionValues(t *testing.T) {
	fields := func(err error) []string {
		var out []string
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			if j, ok := e.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					out = append(out, e.(*flechtwerk.ConfigError).Field)
				}
				continue
			}
			out = append(out, e.(*flechtwerk.ConfigError).Field)
		}
		return out
	}

	_, err := runner.NewTransformer(newTr, runner.InputTopics("in", "in"), runner.MaxPollRecords(0),
		runner.BatchTimeout(time.Minute), runner.TransactionTimeout(time.Minute), runner.Concurrency(0),
		runner.InvalidRecords(runner.DeadLetter("")))
	require.ErrorIs(t, err, flechtwerk.ErrNoBrokers)
	require.ErrorIs(t, err, flechtwerk.ErrEmptyApplicationID)
	require.ErrorIs(t, err, flechtwerk.ErrDuplicateTopic)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	require.ErrorIs(t, err, flechtwerk.ErrTransactionTimeout)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidRecordPolicy)
	require.ElementsMatch(t, []string{"ApplicationID", "SeedBrokers", "Concurrency", "InputTopics", "MaxPollRecords",
		"TransactionTimeout", "InvalidRecords"}, fields(err))

	_, err = runner.NewExtractor(newEx, runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"),
		runner.TombstonedCursors(runner.CursorPolicy(9)), runner.QuarantineFailingConfigs(-time.Second))
	require.ErrorIs(t, err, flechtwerk.ErrNoConfigTopics)
	require.ErrorIs(t, err, flechtwerk.ErrNoPollInterval)
	require.ElementsMatch(t, []string{"ConfigTopics", "PollInterval", "TombstonedCursors", "QuarantineFailingConfigs"}, fields(err))

	_, err = runner.NewSink(newSk, runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"),
		runner.CommitKeepalive(0), runner.AutoCommitInterval(time.Second))
	require.ErrorIs(t, err, flechtwerk.ErrNoInputTopics)
	require.ErrorIs(t, err, flechtwerk.ErrDeliveryConflict)
	require.ElementsMatch(t, []string{"InputTopics", "CommitKeepalive", "AutoCommitInterval"}, fields(err))

	_, err = runner.NewBridge(newBr, runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"),
		runner.TransactionTimeout(0))
	require.ErrorIs(t, err, flechtwerk.ErrNoConfigTopics)
	require.ElementsMatch(t, []string{"ConfigTopics", "TransactionTimeout"}, fields(err))
}

type notAStage struct{}

func (notAStage) Validate() error { return nil }
