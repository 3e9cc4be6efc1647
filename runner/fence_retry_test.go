package runner

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestFenceRetryKeepsTasksRunning: the first fence of the tasks that move
// to a and b outlives TaskTimeout (held by the broker), fails with a
// transient error (the deadline) and is retried (startFailed,
// restartTask). While the retried fence is held, every task a and b kept
// goes on committing new input (the retry runs beside the main loop, like
// a first start). When the broker lets go, the abandoned first
// InitProducerID may be processed after the retry's and fence the
// re-initialized task: a fence of a task that has not committed since it
// recovered is ridden out (selfFenced), so no instance ends, the lag
// reaches 0 and the output is exactly once.
func TestFenceRetryKeepsTasksRunning(t *testing.T) {
	c, fc := kafkatest.Fake(t)
	in, out, app := kafkatest.Name("fretry-in"), kafkatest.Name("fretry-out"), kafkatest.Name("fretry")
	const partitions = 12
	const taskTimeout = 5 * time.Second
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	hold := holdFences(fc, app)
	t.Cleanup(hold.let)

	f := feed(t, c, in, partitions)
	counts := &commitCounts{n: map[string]map[int32]int{}}
	inst := map[string]*instance{}
	for _, name := range []string{"a", "b", "c"} {
		opts := append(coopOpts(c.Brokers, app, in, t.TempDir(), name), TaskTimeout(taskTimeout), WithKafkaOpts(c.Opts()...))
		r, err := NewTransformer(echoCount(out), opts...)
		require.NoError(t, err)
		hooks := transform.Hooks{Committed: counts.hook(name)}
		ctx, cancel := context.WithCancel(context.Background())
		i := &instance{r: r, cancel: cancel, done: make(chan error, 1)}
		go func() { i.done <- r.run(ctx, hooks) }()
		t.Cleanup(func() { _ = i.stop(t) })
		inst[name] = i
	}
	t.Cleanup(hold.let)
	s0 := groupTasks(t, c, app, map[string]int{"a": 4, "b": 4, "c": 4}, inst)

	hold.on.Store(true)
	require.NoError(t, inst["c"].stop(t))
	delete(inst, "c")
	kafkatest.WaitFor(t, 60*time.Second, "the moved tasks' first fences held", func() bool { return hold.held.Load() >= 4 })
	// The first fences time out after TaskTimeout; their retries are held.
	kafkatest.WaitFor(t, 3*taskTimeout, "a retried fence held", func() bool { return hold.held.Load() >= 5 })
	time.Sleep(300 * time.Millisecond)

	before := map[string]map[int32]int{}
	for _, name := range []string{"a", "b"} {
		before[name] = map[int32]int{}
		for _, n := range s0[name] {
			before[name][n] = counts.of(name, n)
		}
	}
	time.Sleep(2 * time.Second) // the retried fences stay held
	stalled := map[string][]int32{}
	for name, ns := range before {
		for n, k := range ns {
			if counts.of(name, n) < k+3 {
				stalled[name] = append(stalled[name], n)
			}
		}
	}
	hold.let()
	t.Logf("stalled kept tasks: %v", stalled)

	groupTasks(t, c, app, map[string]int{"a": 6, "b": 6}, inst)
	ins := f.finish(t)
	ends := c.EndOffsets(t, in)
	deadline := time.Now().Add(60 * time.Second)
	for !maps.Equal(c.CommittedOffsets(t, app, in), ends) {
		if time.Now().After(deadline) {
			ended := map[string]error{}
			for name, i := range inst {
				select {
				case err := <-i.done:
					i.done <- err
					ended[name] = err
				default:
				}
			}
			t.Fatalf("lag not 0 after 60s: committed %v, ends %v, ended %v", c.CommittedOffsets(t, app, in), ends, ended)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for name, i := range inst {
		require.NoError(t, i.stop(t), "instance %s", name)
	}
	requireEchoExactlyOnce(t, ins, c.ReadCommitted(t, out))
	require.Empty(t, stalled, "kept tasks that did not commit for 2s while a retried fence was held")
}
