package runner

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// fenceHold holds back the InitProducerID requests of an application's
// transactional IDs (the fences of its tasks) while it is on, until it is
// released.
type fenceHold struct {
	app     string
	on      atomic.Bool
	held    atomic.Int64 // requests held so far
	release chan struct{}
	once    sync.Once
}

func holdFences(fc *kfake.Cluster, app string) *fenceHold {
	h := &fenceHold{app: app, release: make(chan struct{})}
	fc.ControlKey(kmsg.InitProducerID.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		req := kreq.(*kmsg.InitProducerIDRequest)
		if !h.on.Load() || req.TransactionalID == nil || !strings.HasPrefix(*req.TransactionalID, h.app+"-") {
			return nil, nil, false
		}
		h.held.Add(1)
		// Other requests go on meanwhile; the broker then handles
		// this one as usual.
		fc.SleepControl(func() { <-h.release })
		return nil, nil, false
	})
	return h
}

func (h *fenceHold) let() { h.once.Do(func() { close(h.release) }) }

// commitCounts counts the commits of each instance's tasks.
type commitCounts struct {
	mu sync.Mutex
	n  map[string]map[int32]int
}

func (c *commitCounts) hook(name string) func(int32) {
	return func(n int32) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n[name] == nil {
			c.n[name] = map[int32]int{}
		}
		c.n[name][n]++
	}
}

func (c *commitCounts) of(name string, n int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name][n]
}

// TestSlowFenceKeepsTasksRunning stops one of three instances while the
// fences of the tasks that move to the other two are held back by the
// broker: every task the two kept goes on committing new input meanwhile
// (the fence of a newly assigned task does not hold the poll), the moved
// tasks start once their fences complete, and a read_committed reader sees
// every input's effect exactly once.
func TestSlowFenceKeepsTasksRunning(t *testing.T) {
	c, fc := kafkatest.Fake(t)
	in, out, app := kafkatest.Name("fence-in"), kafkatest.Name("fence-out"), kafkatest.Name("fence")
	const partitions = 12
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	hold := holdFences(fc, app)
	t.Cleanup(hold.let)

	f := feed(t, c, in, partitions)
	counts := &commitCounts{n: map[string]map[int32]int{}}
	inst := map[string]*instance{}
	for _, name := range []string{"a", "b", "c"} {
		r, err := NewTransformer(echoCount(out), append(coopOpts(c.Brokers, app, in, t.TempDir(), name), WithKafkaOpts(c.Opts()...))...)
		require.NoError(t, err)
		hooks := transform.Hooks{Committed: counts.hook(name)}
		ctx, cancel := context.WithCancel(context.Background())
		i := &instance{r: r, cancel: cancel, done: make(chan error, 1)}
		go func() { i.done <- r.run(ctx, hooks) }()
		t.Cleanup(func() { _ = i.stop(t) })
		inst[name] = i
	}
	t.Cleanup(hold.let) // before the instances stop
	s0 := groupTasks(t, c, app, map[string]int{"a": 4, "b": 4, "c": 4}, inst)
	st0 := starts(inst)

	hold.on.Store(true)
	require.NoError(t, inst["c"].stop(t))
	delete(inst, "c")
	kafkatest.WaitFor(t, 60*time.Second, "the moved tasks' fences held", func() bool { return hold.held.Load() >= 4 })

	// While the fences are held, every kept task commits new input.
	before := map[string]map[int32]int{}
	for _, name := range []string{"a", "b"} {
		before[name] = map[int32]int{}
		for _, n := range s0[name] {
			before[name][n] = counts.of(name, n)
		}
	}
	kafkatest.WaitFor(t, 60*time.Second, "kept tasks committing while the fences are held", func() bool {
		for name, ns := range before {
			for n, k := range ns {
				if counts.of(name, n) < k+3 {
					return false
				}
			}
		}
		return true
	})
	for name, i := range inst {
		require.Subset(t, i.running(), s0[name], "%s: a kept task stopped", name)
		require.Len(t, i.running(), len(s0[name]), "%s: a moved task runs before its fence completed", name)
	}

	hold.let()
	s1 := groupTasks(t, c, app, map[string]int{"a": 6, "b": 6}, inst)
	requireKept(t, "leave", s0, s1, true)
	requireUnmoved(t, "leave", s0, s1, st0, inst)

	finishEchoExactlyOnce(t, c, f, app, in, out, inst)
}

// TestRevokedWhileFencing revokes a task from an instance while the task's
// fence is still held back by the broker: three instances run, a third
// joined with its fences held, and a fourth joins, which moves one of the
// joined instance's still-starting tasks on. The revocation waits for the
// start and tears the task down cleanly (no instance fails, the task's
// new owner is not fenced by a late start), and a read_committed reader
// sees every input's effect exactly once.
func TestRevokedWhileFencing(t *testing.T) {
	c, fc := kafkatest.Fake(t)
	in, out, app := kafkatest.Name("revfence-in"), kafkatest.Name("revfence-out"), kafkatest.Name("revfence")
	const partitions = 12
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	hold := holdFences(fc, app)
	t.Cleanup(hold.let)

	// Once armed, the first SyncGroup of member cid releases the hold a
	// moment later: its assignment revokes a task it is starting.
	var (
		armed  atomic.Bool
		cid    atomic.Value
		synced atomic.Bool
	)
	fc.ControlKey(kmsg.SyncGroup.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		req := kreq.(*kmsg.SyncGroupRequest)
		if armed.Load() && req.MemberID == cid.Load() && synced.CompareAndSwap(false, true) {
			time.AfterFunc(500*time.Millisecond, hold.let)
		}
		return nil, nil, false
	})

	f := feed(t, c, in, partitions)
	inst := map[string]*instance{}
	opts := func(name string) []TransformerOpt {
		return append(coopOpts(c.Brokers, app, in, t.TempDir(), name), WithKafkaOpts(c.Opts()...))
	}
	inst["a"] = startInstance(t, echoCount(out), opts("a")...)
	inst["b"] = startInstance(t, echoCount(out), opts("b")...)
	t.Cleanup(hold.let) // before the instances stop
	groupTasks(t, c, app, map[string]int{"a": 6, "b": 6}, inst)

	hold.on.Store(true)
	inst["c"] = startInstance(t, echoCount(out), opts("c")...)
	kafkatest.WaitFor(t, 60*time.Second, "c's fences held", func() bool { return hold.held.Load() >= 4 })
	kafkatest.WaitFor(t, 60*time.Second, "c's member id", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		groups, err := c.Adm.DescribeGroups(ctx, app)
		if err != nil {
			return false
		}
		for _, m := range groups[app].Members {
			if m.ClientID == "c" {
				cid.Store(m.MemberID)
				return true
			}
		}
		return false
	})
	armed.Store(true)
	inst["d"] = startInstance(t, echoCount(out), opts("d")...)
	groupTasks(t, c, app, map[string]int{"a": 3, "b": 3, "c": 3, "d": 3}, inst)
	require.True(t, synced.Load(), "c synced while its fences were held")

	finishEchoExactlyOnce(t, c, f, app, in, out, inst)
}
