package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestNewOptionOfOtherKind: an option of the other stage kind is a coded
// config error naming the option, reported with every other problem.
func TestNewOptionOfOtherKind(t *testing.T) {
	base := []runner.Opt{runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app")}

	ex := extractor.New(func(context.Context, extractor.Config[struct{}], struct{}, *extractor.Emitter[struct{}]) error {
		return nil
	})
	_, err := runner.New(ex, append(base, runner.ConfigTopics("cfg"), runner.PollInterval(time.Second),
		runner.InputTopics("in"), runner.MaxPollRecords(10), runner.Concurrency(0))...)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	require.ErrorContains(t, err, "InputTopics: an option for a transformer only, given for an extractor")
	require.ErrorContains(t, err, "MaxPollRecords")
	require.ErrorContains(t, err, "Concurrency: must be positive")

	tr := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil })
	_, err = runner.New(tr, append(base, runner.InputTopics("in"), runner.PageTimeout(time.Second),
		runner.TombstonedCursors(runner.KeepCursors))...)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	require.ErrorContains(t, err, "PageTimeout: an option for an extractor only, given for a transformer")
	require.ErrorContains(t, err, "TombstonedCursors")

	_, err = runner.New(tr, append(base, runner.InputTopics("in"))...)
	require.NoError(t, err)
}

// TestNewUnsupportedStage: a value that is neither a transformer nor an
// extractor is refused with CodeInvalidTransformer.
func TestNewUnsupportedStage(t *testing.T) {
	_, err := runner.New(notAStage{}, runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"), runner.InputTopics("in"))
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
	_, err = runner.New(nil, runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"), runner.InputTopics("in"))
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
}

type notAStage struct{}

func (notAStage) Validate() error { return nil }
