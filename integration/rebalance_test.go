package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// holders records which runner processed which partition.
type holders struct {
	mu  sync.Mutex
	got map[string]map[int32]bool
}

func (h *holders) track(id string) func(*transformer.Record) error {
	return func(rec *transformer.Record) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.got[id] == nil {
			h.got[id] = map[int32]bool{}
		}
		h.got[id][rec.Partition] = true
		return nil
	}
}

// take returns the partitions each runner processed since the last take.
func (h *holders) take() map[string][]int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]int32{}
	for id, ps := range h.got {
		out[id] = slices.Sorted(maps.Keys(ps))
	}
	h.got = map[string]map[int32]bool{}
	return out
}

// waitMembers waits until group is stable with one member per runner, each
// holding some partitions; a runner that ends fails the test.
func waitMembers(t testing.TB, c *kafkatest.Cluster, group string, runners ...*running) {
	t.Helper()
	n := len(runners)
	kafkatest.WaitFor(t, 30*time.Second, fmt.Sprintf("group %s stable with %d members holding partitions", group, n), func() bool {
		for i, r := range runners {
			select {
			case <-r.exited:
				t.Fatalf("runner %d ended while joining: %v", i, r.err)
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		groups, err := c.Adm.DescribeGroups(ctx, group)
		if err != nil {
			return false
		}
		g, ok := groups[group]
		if !ok || g.Err != nil || g.State != "Stable" || len(g.Members) != n {
			return false
		}
		for _, m := range g.Members {
			a, ok := m.Assigned.AsConsumer()
			if !ok || len(a.Topics) == 0 || len(a.Topics[0].Partitions) == 0 {
				return false
			}
		}
		return true
	})
}

// TestTwoRunnersSplitAndHandOver runs two runners of one application: they
// split the tasks, each processing some partitions and no partition
// processed by both (the two start together, so this also proves that
// racing instances both get past creating the changelog). When one stops, the other takes its tasks over, and
// the state continues across the handover: every input's count is exact,
// with no gap and no duplicate.
func TestTwoRunnersSplitAndHandOver(t *testing.T) {
	c := kafkatest.New(t)
	c.TraceTransactions(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions = 4
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	produce := func(prefix string, n int) []*kgo.Record {
		var recs []*kgo.Record
		for p := range int32(partitions) {
			rs := values(in, p, fmt.Sprintf("%s%d-", prefix, p), n, 3)
			for _, r := range rs {
				r.Key = fmt.Appendf(nil, "p%d-%s", p, r.Key)
			}
			recs = append(recs, rs...)
		}
		c.Produce(t, recs...)
		return recs
	}

	h := &holders{got: map[string]map[int32]bool{}}
	opts := func() []runner.TransformerOpt {
		return []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
			runner.StateDir(t.TempDir()), runner.MaxPollRecords(10),
			runner.SessionTimeout(3 * time.Second),
			runner.WithConsumerOpts(kgo.HeartbeatInterval(200 * time.Millisecond))}
	}
	a := start(t, c, echoCounter(out, h.track("a")), opts()...)
	b := start(t, c, echoCounter(out, h.track("b")), opts()...)
	waitMembers(t, c, app, a, b)

	first := produce("a", 30)
	waitCommitted(t, c, app, in, 30*time.Second, a.done)
	split := h.take()
	t.Logf("partitions processed while both ran: %v", split)
	require.NotEmpty(t, split["a"], "runner a processed no partition")
	require.NotEmpty(t, split["b"], "runner b processed no partition")
	for _, p := range split["a"] {
		require.NotContains(t, split["b"], p, "partition %d processed by both runners", p)
	}
	require.Len(t, append(split["a"], split["b"]...), partitions)

	require.NoError(t, a.stop(t))
	second := produce("b", 30)
	waitCommitted(t, c, app, in, 30*time.Second, b.done)
	require.Equal(t, map[string][]int32{"b": {0, 1, 2, 3}}, h.take(), "b took every task over")
	require.NoError(t, b.stop(t))

	requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
}

// TestRollingHandOvers starts a runner next to the running one and then
// stops the older, round after round, with input arriving while they
// split the tasks and while the older one hands its tasks over: every task
// moves between processes many times, and every input is processed exactly
// once across all of it.
func TestRollingHandOvers(t *testing.T) {
	c := kafkatest.New(t)
	c.TraceTransactions(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions = 4
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	var all []*kgo.Record
	produce := func(prefix string) {
		var recs []*kgo.Record
		for p := range int32(partitions) {
			rs := values(in, p, fmt.Sprintf("%s%d-", prefix, p), 20, 3)
			for _, r := range rs {
				r.Key = fmt.Appendf(nil, "p%d-%s", p, r.Key)
			}
			recs = append(recs, rs...)
		}
		c.Produce(t, recs...)
		all = append(all, recs...)
	}
	opts := func() []runner.TransformerOpt {
		return []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
			runner.StateDir(t.TempDir()), runner.MaxPollRecords(10),
			runner.SessionTimeout(3 * time.Second),
			runner.WithConsumerOpts(kgo.HeartbeatInterval(200 * time.Millisecond))}
	}
	older := start(t, c, echoCounter(out, nil), opts()...)
	waitMembers(t, c, app, older)
	for round := range 5 {
		newer := start(t, c, echoCounter(out, nil), opts()...)
		produce(fmt.Sprintf("r%da", round))
		waitMembers(t, c, app, older, newer)
		waitCommitted(t, c, app, in, 60*time.Second, newer.done)
		produce(fmt.Sprintf("r%db", round))
		require.NoError(t, older.stop(t), "round %d: the older runner", round)
		waitCommitted(t, c, app, in, 60*time.Second, newer.done)
		older = newer
	}
	require.NoError(t, older.stop(t))
	requireExactlyOnce(t, all, readStable(t, c, out))
}

// clientTasks returns the partitions (of the one input topic) each member
// of group holds, by client id.
func clientTasks(t testing.TB, c *kafkatest.Cluster, group string) map[string][]int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := c.Adm.DescribeGroups(ctx, group)
	require.NoError(t, err)
	out := map[string][]int32{}
	for _, m := range groups[group].Members {
		a, ok := m.Assigned.AsConsumer()
		require.True(t, ok)
		for _, tp := range a.Topics {
			out[m.ClientID] = append(out[m.ClientID], tp.Partitions...)
		}
		slices.Sort(out[m.ClientID])
	}
	return out
}

// waitGroupState waits until group is in state.
func waitGroupState(t testing.TB, c *kafkatest.Cluster, group, state string) {
	t.Helper()
	kafkatest.WaitFor(t, 30*time.Second, fmt.Sprintf("group %s in state %s", group, state), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		groups, err := c.Adm.DescribeGroups(ctx, group)
		if err != nil {
			return false
		}
		g, ok := groups[group]
		return ok && g.Err == nil && g.State == state
	})
}

// TestRebalanceWaitsForInFlightBatch lets a second runner join while the
// first is in the middle of a batch: the rebalance waits until that batch
// committed, then the two split the tasks, and every input is processed
// exactly once across the rebalance.
func TestRebalanceWaitsForInFlightBatch(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions = 4
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	produce := func(prefix string) []*kgo.Record {
		var recs []*kgo.Record
		for p := range int32(partitions) {
			rs := values(in, p, fmt.Sprintf("%s%d-", prefix, p), 20, 3)
			for _, r := range rs {
				r.Key = fmt.Appendf(nil, "p%d-%s", p, r.Key)
			}
			recs = append(recs, rs...)
		}
		c.Produce(t, recs...)
		return recs
	}
	opts := func() []runner.TransformerOpt {
		return []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
			runner.StateDir(t.TempDir()), runner.MaxPollRecords(1000),
			runner.SessionTimeout(3 * time.Second),
			runner.WithConsumerOpts(kgo.HeartbeatInterval(200 * time.Millisecond))}
	}
	first := produce("a")

	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := &holders{got: map[string]map[int32]bool{}}
	track := h.track("a")
	a := start(t, c, echoCounter(out, func(rec *transformer.Record) error {
		if string(rec.Value) == "a0-5" {
			once.Do(func() { close(reached) })
			<-release
		}
		return track(rec)
	}), opts()...)
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("runner a did not reach the blocking record")
	}

	b := start(t, c, echoCounter(out, h.track("b")), opts()...)
	// b's join starts a rebalance that cannot complete while a's batch
	// runs.
	waitGroupState(t, c, app, "PreparingRebalance")
	close(release)
	waitMembers(t, c, app, a, b)

	second := produce("b")
	waitCommitted(t, c, app, in, 30*time.Second, a.done)
	split := h.take()
	require.NotEmpty(t, split["a"])
	require.NotEmpty(t, split["b"])
	require.NoError(t, a.stop(t))
	require.NoError(t, b.stop(t))
	requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
}
