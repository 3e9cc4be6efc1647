package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestTracingOptionsTransformerOnly: the tracing options are a
// transformer's; given for an extractor, they are coded config errors
// naming them.
func TestTracingOptionsTransformerOnly(t *testing.T) {
	base := []runner.Opt{runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"),
		runner.WithTracerProvider(noop.NewTracerProvider()), runner.WithPropagator(propagation.TraceContext{})}

	ex := extractor.New(func(context.Context, extractor.Config[struct{}], struct{}, *extractor.Emitter[struct{}]) error {
		return nil
	})
	_, err := runner.New(ex, append(base, runner.ConfigTopics("cfg"), runner.PollInterval(time.Second))...)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	require.ErrorContains(t, err, "WithTracerProvider: an option for a transformer only, given for an extractor")
	require.ErrorContains(t, err, "WithPropagator: an option for a transformer only, given for an extractor")

	tr := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil })
	_, err = runner.New(tr, append(base, runner.InputTopics("in"))...)
	require.NoError(t, err)
}
