package standby

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/store"
)

// TestStandbyKeepsEveryStore: a task with a named store and a timer store
// beside its default one. Its owner writes all three changelogs in each
// transaction, commits some, aborts others. The standby keeps each store,
// restored and then tailed, with its own checkpoint at its own
// changelog's last stable offset; the timer store's due index lists the
// committed timers exactly (replaced and cancelled ones included); every
// store equals a cold restore of its changelog; Offsets sums the stores'
// checkpoints and Lag their lags; Release unlocks every store.
func TestStandbyKeepsEveryStore(t *testing.T) {
	ctx := context.Background()
	c := kafkatest.New(t)
	app := kafkatest.Name("stores")
	topics := []string{changelog.Topic(app), changelog.StoreTopic(app, "counts"), changelog.TimersTopic(app)}
	for _, tp := range topics {
		c.CreateTopic(t, tp, 2)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.TransactionalID(app+"-1"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	timer := func(key string, due int64) []byte {
		if due < 0 {
			return nil
		}
		return store.TimerValue(1, due)
	}
	// txn writes, on partition 1: default key d, named key k, a timer of
	// key d (due < 0: a cancel) and the stream time.
	txn := func(commit bool, d, k string, due, streamTime int64) {
		t.Helper()
		require.NoError(t, cl.BeginTransaction())
		recs := []*kgo.Record{
			{Topic: topics[0], Partition: 1, Key: []byte(d), Value: []byte("s" + d)},
			{Topic: topics[1], Partition: 1, Key: []byte(k), Value: []byte("n" + k)},
			{Topic: topics[2], Partition: 1, Key: store.TimerKey([]byte(d), "t"), Value: timer(d, due)},
			{Topic: topics[2], Partition: 1, Key: store.StreamTimeKey, Value: store.StreamTimeValue(streamTime)},
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
		require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	want := map[string]int64{} // committed timers of key -> due
	run := func(from, to int) {
		for i := from; i < to; i++ {
			d := fmt.Sprintf("d%d", i%5)
			due := int64(100 - i)
			if i%4 == 3 {
				due = -1
			}
			commit := i%6 != 5
			txn(commit, d, fmt.Sprintf("k%d", i), due, int64(i))
			if commit {
				if due < 0 {
					delete(want, d)
				} else {
					want[d] = due
				}
			}
		}
	}
	run(0, 12) // before the standby: its restore

	dir := t.TempDir()
	errs := make(chan error, 1)
	m, err := New(Config{
		ApplicationID: app, Changelog: topics[0], StateDir: dir,
		Stores: []Store{{Name: "counts", Topic: topics[1]}, {Name: "timers", Topic: topics[2], Timers: true}},
		Admin:  c.Adm, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		TransactionTimeout: time.Minute,
		OnError:            func(err error) { errs <- err },
		Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Set([]int32{1}))

	caughtUp := func() map[string]int64 {
		t.Helper()
		ends := map[string]int64{}
		for _, tp := range topics {
			kafkatest.WaitFor(t, 30*time.Second, "no transaction pending on "+tp, func() bool {
				offs, err := c.Adm.ListCommittedOffsets(ctx, tp)
				require.NoError(t, err)
				o, _ := offs.Lookup(tp, 1)
				ends[tp] = o.Offset
				return o.Offset == c.EndOffsets(t, tp)[1]
			})
		}
		kafkatest.WaitFor(t, 30*time.Second, "every store at its last stable offset", func() bool {
			select {
			case err := <-errs:
				require.NoError(t, err)
			default:
			}
			offs := m.StoreOffsets()[1]
			for _, tp := range topics {
				if offs[tp] != ends[tp] {
					return false
				}
			}
			return true
		})
		return ends
	}
	check := func(ends map[string]int64) {
		t.Helper()
		for s, tp := range topics {
			cold, err := store.Open(ctx, t.TempDir(), store.Options{Timers: s == 2})
			require.NoError(t, err)
			_, err = changelog.Restore(ctx, c.Adm, tp, 1, cold, kgo.SeedBrokers(c.Brokers...))
			require.NoError(t, err)
			coldState := map[string]string{}
			require.NoError(t, cold.Range(func(k, v []byte) bool { coldState[string(k)] = string(v); return true }))
			require.NoError(t, cold.Close())
			require.Equal(t, coldState, m.viewStore(t, 1, s), tp)
		}
		m.mu.Lock()
		ts := m.replica(1, 2).st
		got := map[string]int64{}
		require.NoError(t, ts.Due(1, math.MaxInt64, func(key []byte, name string, due int64) (bool, error) {
			require.Equal(t, "t", name)
			got[string(key)] = due
			return true, nil
		}))
		m.mu.Unlock()
		require.Equal(t, want, got)
		require.Equal(t, map[int32]int64{1: ends[topics[0]] + ends[topics[1]] + ends[topics[2]]}, m.Offsets())
		lag, err := m.Lag(ctx)
		require.NoError(t, err)
		require.Equal(t, map[int32]int64{1: 0}, lag)
	}
	check(caughtUp())
	require.Len(t, m.viewStore(t, 1, 1), 10, "k0..k11 less the aborted k5, k11")

	run(12, 40) // while it tails
	ends := caughtUp()
	check(ends)

	require.NoError(t, m.Release(1))
	for s, d := range []string{store.Dir(dir, app, 1), store.NamedDir(dir, app, 1, "counts"), store.NamedDir(dir, app, 1, "timers")} {
		st, err := store.Open(ctx, d, store.Options{ApplicationID: app, Timers: s == 2, LockWait: -1})
		require.NoError(t, err, "the store %s is not locked", d)
		cp, ok := st.Checkpoint()
		require.True(t, ok)
		require.Equal(t, ends[topics[s]], cp.Next, "each store keeps its own checkpoint")
		if s == 2 {
			ms, ok := st.StreamTime()
			require.True(t, ok)
			require.Equal(t, int64(39), ms)
		}
		require.NoError(t, st.Close())
	}
	require.Empty(t, m.Offsets())
}

func TestNewRefusesBadStores(t *testing.T) {
	for name, stores := range map[string][]Store{
		"bad name":       {{Name: "Bad", Topic: "x"}},
		"duplicate name": {{Name: "a", Topic: "x"}, {Name: "a", Topic: "y"}},
		"no topic":       {{Name: "a"}},
		"same topic":     {{Name: "a", Topic: "app-changelog"}},
		"timers without": {{Name: "timers", Topic: "x"}},
		"timers flag":    {{Name: "a", Topic: "x", Timers: true}},
	} {
		_, err := New(Config{ApplicationID: "app", Changelog: "app-changelog", Stores: stores, OnError: func(error) {}})
		require.Error(t, err, name)
	}
}
