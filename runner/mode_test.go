package runner

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestTransactionModeMismatchRefused: an instance that runs the other
// transaction mode than the group's members is refused by the group
// before it is assigned anything, and Run ends with a coded error naming
// both modes; the running instance goes on. Either way round.
func TestTransactionModeMismatchRefused(t *testing.T) {
	for _, first := range []bool{false, true} {
		name := "running=per-task"
		if first {
			name = "running=shared"
		}
		t.Run(name, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("mode-in"), kafkatest.Name("mode-out"), kafkatest.Name("mode")
			c.CreateTopic(t, in, 2)
			c.CreateTopic(t, out, 2)
			opts := func(name string, shared bool) []TransformerOpt {
				o := append(coopOpts(c.Brokers, app, in, t.TempDir(), name), WithKafkaOpts(c.Opts()...))
				if shared {
					o = append(o, SharedProducer())
				}
				return o
			}
			logs := &kafkatest.LogBuffer{}
			a := startInstance(t, echoCount(out), append(opts("a", first), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))...)
			kafkatest.WaitFor(t, 60*time.Second, "the first instance runs both tasks", func() bool { return len(a.running()) == 2 })

			b := startInstance(t, echoCount(out), opts("b", !first)...)
			var err error
			select {
			case err = <-b.done:
				b.done <- err
			case <-time.After(60 * time.Second):
				t.Fatal("the instance of the other mode was not refused within 60s")
			}
			t.Logf("refused: %v", err)
			require.ErrorIs(t, err, flechtwerk.ErrTransactionModeMismatch)
			require.ErrorContains(t, err, "SharedProducer")
			require.Equal(t, []int32{0, 1}, a.running(), "the first instance keeps its tasks")
			require.NoError(t, a.stop(t))
			if first {
				require.Contains(t, logs.String(), "transactions: shared-producer mode", "the start-up log names the mode")
			} else {
				require.Contains(t, logs.String(), "transactions: a producer per task", "the start-up log names the mode")
			}
		})
	}
}

// TestStartupLogPointsToSharedMode: in the default mode with many
// partitions the start-up log points to the shared-producer mode.
func TestStartupLogPointsToSharedMode(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("many-in"), kafkatest.Name("many-out"), kafkatest.Name("many")
	c.CreateTopic(t, in, 32)
	c.CreateTopic(t, out, 1)
	logs := &kafkatest.LogBuffer{}
	a := startInstance(t, echoCount(out), append(coopOpts(c.Brokers, app, in, t.TempDir(), "a"),
		WithKafkaOpts(c.Opts()...), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))...)
	kafkatest.WaitFor(t, 60*time.Second, "the start-up log", func() bool {
		return bytes.Contains([]byte(logs.String()), []byte("runner.SharedProducer"))
	})
	require.Contains(t, logs.String(), "partitions=32")
	require.NoError(t, a.stop(t))
}
