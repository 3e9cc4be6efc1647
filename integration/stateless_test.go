package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestStatelessCreatesNoStore runs a stateless transformer: it creates
// nothing under StateDir and no changelog topic, and still processes every
// input exactly once. The stateful case beside it shows what the checks
// would catch.
func TestStatelessCreatesNoStore(t *testing.T) {
	tests := []struct {
		name     string
		proc     func(out string) runner.Stage
		stateful bool
	}{
		{name: "stateless", proc: func(out string) runner.Stage {
			return transformer.Stateless(func(ctx context.Context, rec *transformer.Record, o *transformer.Outputs) error {
				o.Send(out, rec.Key, append([]byte(nil), rec.Value...))
				return nil
			})
		}},
		{name: "stateful", stateful: true, proc: func(out string) runner.Stage {
			return echoCounter(out, nil)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 2)
			c.CreateTopic(t, out, 2)
			recs := append(values(in, 0, "p0-", 10, 2), values(in, 1, "p1-", 10, 2)...)
			c.Produce(t, recs...)

			dir := t.TempDir()
			rn := start(t, c, tc.proc(out), runner.ApplicationID(app), runner.InputTopics(in),
				runner.StateDir(dir), runner.MaxPollRecords(5))
			waitCommitted(t, c, app, in, 30*time.Second, rn.done)
			require.NoError(t, rn.stop(t))

			outs := readStable(t, c, out)
			require.Len(t, outs, len(recs))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			topics, err := c.Adm.ListTopics(ctx, changelog.Topic(app))
			require.NoError(t, err)
			if tc.stateful {
				require.NotEmpty(t, entries, "a stateful transformer keeps its stores under StateDir")
				require.True(t, topics.Has(changelog.Topic(app)), "changelog topic")
				return
			}
			require.ElementsMatch(t, valuesOf(recs), valuesOf(outs))
			require.Empty(t, entries, "nothing under StateDir")
			require.False(t, topics.Has(changelog.Topic(app)), "no changelog topic")
		})
	}
}
