package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// feeder produces records to every partition of a topic until stopped,
// keeping what it produced (with offsets).
type feeder struct {
	mu       sync.Mutex
	produced []*kgo.Record
	stop     chan struct{}
	done     chan error
}

func feed(t testing.TB, c *kafkatest.Cluster, topic string, partitions int32) *feeder {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	require.NoError(t, err)
	f := &feeder{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer cl.Close()
		for i := 0; ; i++ {
			select {
			case <-f.stop:
				f.done <- nil
				return
			default:
			}
			var recs []*kgo.Record
			for p := range partitions {
				for j := range 3 {
					recs = append(recs, &kgo.Record{Topic: topic, Partition: p,
						Key: fmt.Appendf(nil, "p%d-k%d", p, j), Value: fmt.Appendf(nil, "v%d-%d-%d", i, p, j)})
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := cl.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			if err != nil {
				f.done <- err
				return
			}
			f.mu.Lock()
			f.produced = append(f.produced, recs...)
			f.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return f
}

// halt stops the feeder and returns what it produced.
func (f *feeder) halt(t testing.TB) []*kgo.Record {
	t.Helper()
	close(f.stop)
	require.NoError(t, <-f.done)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.produced
}

// TestGracefulStop cancels Run's context while records flow: Run returns
// nil, what it committed holds no duplicate, and a restart completes every
// input exactly once. Canceled in the middle of a batch, Run lets that
// batch commit before it returns.
func TestGracefulStop(t *testing.T) {
	t.Run("while records flow", func(t *testing.T) {
		c := kafkatest.New(t)
		in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
		const partitions = 3
		c.CreateTopic(t, in, partitions)
		c.CreateTopic(t, out, partitions)
		opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
			runner.StateDir(t.TempDir()), runner.MaxPollRecords(8)}

		f := feed(t, c, in, partitions)
		rn := start(t, c, echoCounter(out, nil), opts...)
		// Stop once some batches committed and records keep coming.
		kafkatest.WaitFor(t, 30*time.Second, "some committed outputs", func() bool {
			n := int64(0)
			for _, o := range c.CommittedOffsets(t, app, in) {
				n += o
			}
			return n >= 60
		})
		require.NoError(t, rn.stop(t), "a canceled Run returns nil")
		requireAtMostOnce(t, f.halt(t), readStable(t, c, out))

		all := f.produced
		rn = start(t, c, echoCounter(out, nil), opts...)
		waitCommitted(t, c, app, in, 30*time.Second, rn.done)
		require.NoError(t, rn.stop(t))
		requireExactlyOnce(t, all, readStable(t, c, out))
	})

	t.Run("in the middle of a batch", func(t *testing.T) {
		c := kafkatest.New(t)
		in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
		c.CreateTopic(t, in, 1)
		c.CreateTopic(t, out, 1)
		opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
			runner.StateDir(t.TempDir()), runner.MaxPollRecords(1000)}

		hit, canceled := make(chan struct{}), make(chan struct{})
		var once sync.Once
		proc := echoCounter(out, func(rec *transformer.Record) error {
			if string(rec.Value) == "a5" {
				once.Do(func() { close(hit) })
				<-canceled
			}
			return nil
		})
		rn := start(t, c, proc, opts...)
		first := values(in, 0, "a", 10, 3)
		c.Produce(t, first...)
		select {
		case <-hit:
		case <-time.After(30 * time.Second):
			t.Fatal("the batch did not reach record a5")
		}
		rn.cancel() // while a5's transform runs
		close(canceled)
		require.NoError(t, rn.wait(t, 30*time.Second), "a canceled Run returns nil")
		outs := readStable(t, c, out)
		requireAtMostOnce(t, first, outs)
		require.Contains(t, valuesOf(outs), "a5#2", "the in-flight batch committed")
		kafkatest.WaitFor(t, 30*time.Second, "the in-flight batch's offsets committed", func() bool {
			return c.CommittedOffsets(t, app, in)[0] > first[5].Offset
		})

		second := values(in, 0, "b", 10, 3)
		c.Produce(t, second...)
		rn = start(t, c, echoCounter(out, nil), opts...)
		waitCommitted(t, c, app, in, 30*time.Second, rn.done)
		require.NoError(t, rn.stop(t))
		requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
	})
}

// TestGracefulStopAfterFence stops Run while its task's transaction is
// open and another producer has taken over the task's transactional ID
// (the new owner, e.g. after this member's session expired unnoticed
// during a broker fault): the final commit is fenced, Run still returns
// nil, nothing of the fenced transaction is visible, its offsets did not
// move, and a restart processes every input exactly once.
func TestGracefulStopAfterFence(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.TransactionTimeout(2 * time.Minute),
		runner.BatchTimeout(10 * time.Second)}

	inputs := values(in, 0, "a", 8, 2)
	c.Produce(t, inputs...)
	rn := start(t, c, echoCounter(out, nil), append(opts, runner.CommitInterval(time.Minute))...)
	// Every output is written inside the open transaction: the interval
	// (a minute) keeps it open.
	require.Eventually(t, func() bool { return c.EndOffsets(t, out)[0] >= int64(len(inputs)) },
		30*time.Second, 20*time.Millisecond, "outputs of the open transaction written")
	requireOpenTransaction(t, c, out, 0)

	fence(t, c, app, 0)
	require.NoError(t, rn.stop(t), "a graceful stop whose final commit is fenced")
	require.Empty(t, readStable(t, c, out), "nothing of the fenced transaction")
	requireOffsets(t, c, app, in, map[int32]int64{})

	rn = start(t, c, echoCounter(out, nil), opts...)
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	requireExactlyOnce(t, inputs, readStable(t, c, out))
}
