package transform

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// commitCounter counts the commits of each task (Hooks.Committed).
type commitCounter struct {
	mu sync.Mutex
	n  map[int32]int
}

func (c *commitCounter) committed(p int32) {
	c.mu.Lock()
	c.n[p]++
	c.mu.Unlock()
}

func (c *commitCounter) get() map[int32]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int32]int, len(c.n))
	for p, n := range c.n {
		out[p] = n
	}
	return out
}

// TestNoCommitWithoutNewRecords: a task that received nothing since its
// last commit commits nothing at the following ticks, neither a
// transaction nor its offsets, and a task that never received a record
// never commits; a new record makes its task commit once more. Each
// commit of a task costs the broker a transaction (or an offset commit)
// whatever it holds, so idle tasks must cost nothing.
func TestNoCommitWithoutNewRecords(t *testing.T) {
	const interval = 20 * time.Millisecond
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("idle-in"), kafkatest.Name("idle-out"), kafkatest.Name("idle")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)

	cfg := config.Defaults(config.Transformer)
	cfg.Brokers, cfg.ApplicationID, cfg.InputTopics, cfg.StateDir = c.Brokers, app, []string{in}, t.TempDir()
	cfg.SessionTimeout, cfg.MaxPollRecords, cfg.Logger = 3*time.Second, 50, testLogger()
	cfg.CommitInterval = interval
	cfg.ConsumerOpts = []kgo.Opt{kgo.HeartbeatInterval(200 * time.Millisecond)}
	proc, ok := stage.TransformerOf(echoCount(out))
	require.True(t, ok)
	require.NoError(t, cfg.Validate(config.Transformer, proc.Stateful()))
	cfg.EnsureLogger()
	m, err := imetrics.New(nil, app)
	require.NoError(t, err)
	cfg.Metrics = m
	commits := &commitCounter{n: map[int32]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Params{Cfg: &cfg, Proc: proc, Ops: &testOps{}, Hooks: Hooks{Committed: commits.committed}})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("the engine did not stop within 60s")
		}
	})

	c.Produce(t, &kgo.Record{Topic: in, Partition: 0, Key: []byte("k"), Value: []byte("v1")})
	kafkatest.WaitFor(t, 60*time.Second, "offset 1 of partition 0 committed", func() bool {
		return c.CommittedOffsets(t, app, in)[0] == 1
	})
	kafkatest.WaitFor(t, 10*time.Second, "the commit of task 0 counted", func() bool {
		return commits.get()[0] >= 1
	})
	// Twenty ticks with nothing new.
	time.Sleep(20 * interval)
	require.Equal(t, map[int32]int{0: 1}, commits.get(), "no commit of a task with nothing new, none of a task that never had a record")

	c.Produce(t, &kgo.Record{Topic: in, Partition: 0, Key: []byte("k"), Value: []byte("v2")})
	kafkatest.WaitFor(t, 60*time.Second, "offset 2 of partition 0 committed", func() bool {
		return c.CommittedOffsets(t, app, in)[0] == 2
	})
	kafkatest.WaitFor(t, 10*time.Second, "the second commit of task 0 counted", func() bool {
		return commits.get()[0] >= 2
	})
	time.Sleep(20 * interval)
	require.Equal(t, map[int32]int{0: 2}, commits.get(), "one commit per interval that had new records")
}
