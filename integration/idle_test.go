package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/group"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// sometimesCounter counts and emits like echoCounter for values starting
// with "w"; other records change no state and emit nothing.
func sometimesCounter(out string) *transformer.Stage[int] {
	return transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		if !strings.HasPrefix(string(rec.Value), "w") {
			return nil
		}
		n++
		e.SetState(n)
		e.Send(out, rec.Key, []byte(fmt.Sprintf("%s#%d", rec.Value, n)))
		return nil
	})
}

// TestIdleLag checks that committed offsets reach the end offsets (lag 0)
// when records produce no output and change no state: batches that write
// nothing commit their offsets through the group member, batches that
// write commit them in their transaction, and the two kinds interleave on
// the same partitions (and run side by side in one poll on different
// tasks) without the committed offset ever staying behind.
func TestIdleLag(t *testing.T) {
	const partitions = 2
	// Each phase gives, per partition, what its records do in offset
	// order: "w" write, "i" idle. With MaxPollRecords(4) a run of "w"
	// followed by a run of "i" gives a transactional commit followed at
	// once by a direct one on the same partition, and the reverse.
	phases := [][partitions]string{
		{"wwwwww", "wwwwww"},
		{"iiiiii", "iiiiii"},
		{"wwwwww", "iiiiii"},
		{"iiiiii", "wwwwww"},
		{"wiwiwi", "iwiwiw"},
		{"wwwwiiiiiiii", "wwwwiiiiiiii"},
		{"iiiiiiiiwwww", "iiiiiiiiwwww"},
		{"wwiiiiiiiiii", "iiiiiiiiiiww"},
		{"iiiiii", "iiiiii"},
	}
	tests := []struct {
		name string
		proc func(out string) runner.Stage
		// writes: the transformer writes for "w" records.
		writes bool
	}{
		{name: "stateful, some records idle", writes: true, proc: func(out string) runner.Stage { return sometimesCounter(out) }},
		{name: "stateless, all records idle", proc: func(string) runner.Stage {
			return transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil })
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, partitions)
			c.CreateTopic(t, out, partitions)
			opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
				runner.StateDir(t.TempDir()), runner.MaxPollRecords(4)}
			rn := start(t, c, tc.proc(out), opts...)

			var written []*kgo.Record
			for i, phase := range phases {
				var recs []*kgo.Record
				for p := range int32(partitions) {
					for j, kind := range phase[p] {
						r := &kgo.Record{Topic: in, Partition: p,
							Key:   fmt.Appendf(nil, "p%d-k%d", p, j%3),
							Value: fmt.Appendf(nil, "%c%d-%d-%d", kind, i, p, j)}
						recs = append(recs, r)
						if kind == 'w' && tc.writes {
							written = append(written, r)
						}
					}
				}
				c.Produce(t, recs...)
				waitCommitted(t, c, app, in, 30*time.Second, rn.done)
			}
			require.NoError(t, rn.stop(t))
			ends := c.EndOffsets(t, in)
			for p := range int32(partitions) {
				n := 0
				for _, phase := range phases {
					n += len(phase[p])
				}
				require.Equal(t, int64(n), ends[p])
			}
			requireOffsets(t, c, app, in, ends)
			if tc.writes {
				requireExactlyOnce(t, written, readStable(t, c, out))
			} else {
				require.Empty(t, readStable(t, c, out))
			}
		})
	}
}

// TestIdleCommitDuringSlowRebalance: while the cooperative group waits for
// a slow member to rejoin, a running task's offsets-only commits cannot go
// out (the client holds commits back between join and sync). The task
// keeps its partition, so its commit waits for the group (or is deferred
// when the coordinator refuses it) instead of failing Run, even with a
// BatchTimeout shorter than the rebalance, and lag reaches zero once the
// group is stable.
func TestIdleCommitDuringSlowRebalance(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	logs := &kafkatest.LogBuffer{}
	a := start(t, c, sometimesCounter(out), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.BatchTimeout(2*time.Second),
		runner.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	idle := func(from, n int) {
		c.Produce(t, values(in, 0, fmt.Sprintf("i%d-", from), n, 3)...)
	}
	idle(0, 20)
	waitCommitted(t, c, app, in, 30*time.Second, a.done)

	// Members of the same protocol that own nothing (the one task stays
	// with a: sticky); x's revocation at the end of a session takes 4s.
	var slow atomic.Bool
	member := func(onRevoked func()) {
		cl, err := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers(c.Brokers...), kgo.ConsumerGroup(app),
			kgo.ConsumeTopics(in), kgo.Balancers(group.NewBalancer(group.BalancerConfig{})),
			kgo.DisableAutoCommit(), kgo.SessionTimeout(10*time.Second),
			kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) { onRevoked() }))...)
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		go func() {
			for {
				if cl.PollFetches(context.Background()).IsClientClosed() {
					return
				}
			}
		}()
	}
	member(func() {
		if slow.Load() {
			time.Sleep(4 * time.Second)
		}
	})
	waitStableMembers(t, c, app, 2)
	idle(20, 20)
	waitCommitted(t, c, app, in, 30*time.Second, a.done)

	slow.Store(true)
	member(func() {})
	// Idle records all along the rebalance (x's revocation alone holds
	// it for 4s).
	for i, until := 40, time.Now().Add(8*time.Second); time.Now().Before(until); i += 5 {
		idle(i, 5)
		time.Sleep(50 * time.Millisecond)
	}
	waitCommitted(t, c, app, in, 30*time.Second, a.done)
	// A commit met the rebalance: held back by the client until the
	// group synced, or refused by the coordinator and deferred.
	require.True(t, strings.Contains(logs.String(), "grabbed join/sync mu after waiting") ||
		strings.Contains(logs.String(), "offsets-only commit deferred by a rebalance"), "a commit met the rebalance")
	require.NoError(t, a.stop(t))
	require.Empty(t, c.ReadCommitted(t, out), "idle records emit nothing")
}

// waitStableMembers waits until group is stable with n members.
func waitStableMembers(t testing.TB, c *kafkatest.Cluster, group string, n int) {
	t.Helper()
	kafkatest.WaitFor(t, 30*time.Second, fmt.Sprintf("group %s stable with %d members", group, n), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		groups, err := c.Adm.DescribeGroups(ctx, group)
		if err != nil {
			return false
		}
		g, ok := groups[group]
		return ok && g.Err == nil && g.State == "Stable" && len(g.Members) == n
	})
}
