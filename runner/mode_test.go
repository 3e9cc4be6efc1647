package runner

import (
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
			a := startInstance(t, echoCount(out), opts("a", first)...)
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
		})
	}
}
