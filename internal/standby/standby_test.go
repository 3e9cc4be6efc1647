package standby

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/restore"
	"github.com/flechtwerk/flechtwerk/store"
)

// owner writes partition 0 of a changelog the way a task's producer does:
// transactionally, under the task's transactional ID.
type owner struct {
	cl    *kgo.Client
	topic string
}

func newOwner(t *testing.T, c *kafkatest.Cluster, app string) *owner {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.TransactionalID(app+"-0"),
		kgo.DefaultProduceTopic(changelog.Topic(app)), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &owner{cl: cl, topic: changelog.Topic(app)}
}

// txn writes kvs (a value "" is a tombstone) in one transaction, every
// record produced before the transaction ends with commit.
func (o *owner) txn(t *testing.T, commit bool, kvs ...string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, o.cl.BeginTransaction())
	o.produce(t, kvs...)
	require.NoError(t, o.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	_ = ctx
}

func (o *owner) produce(t *testing.T, kvs ...string) {
	t.Helper()
	for i := 0; i < len(kvs); i += 2 {
		r := &kgo.Record{Topic: o.topic, Partition: 0, Key: []byte(kvs[i])}
		if kvs[i+1] != "" {
			r.Value = []byte(kvs[i+1])
		}
		require.NoError(t, o.cl.ProduceSync(context.Background(), r).FirstErr())
	}
}

func newManager(t *testing.T, c *kafkatest.Cluster, app, dir string) (*Manager, chan error) {
	t.Helper()
	errs := make(chan error, 1)
	m, err := New(Config{
		ApplicationID: app, Changelog: changelog.Topic(app), StateDir: dir,
		Admin: c.Adm, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		TransactionTimeout: time.Minute,
		OnError:            func(err error) { errs <- err },
		Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m, errs
}

// view returns the contents of the store of standby n, read under the
// Manager's lock (no batch is applied meanwhile).
func (m *Manager) view(t *testing.T, n int32) map[string]string {
	t.Helper()
	return m.viewStore(t, n, 0)
}

// viewStore returns the contents of store s (0: the default one, then
// Config.Stores) of standby n, read under the Manager's lock.
func (m *Manager) viewStore(t *testing.T, n int32, s int) map[string]string {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.replica(n, s)
	require.NotNil(t, r)
	require.NotNil(t, r.st)
	out := map[string]string{}
	require.NoError(t, r.st.Range(func(k, v []byte) bool {
		out[string(k)] = string(v)
		return true
	}))
	return out
}

// lastStable waits until partition 0 of topic has no transaction pending
// (its last stable offset reached its end: every marker is written, which
// EndTxn does not wait for) and returns that offset.
func lastStable(t *testing.T, c *kafkatest.Cluster, topic string) int64 {
	t.Helper()
	var lso int64
	kafkatest.WaitFor(t, 30*time.Second, "no transaction pending on "+topic, func() bool {
		offs, err := c.Adm.ListCommittedOffsets(context.Background(), topic)
		require.NoError(t, err)
		o, ok := offs.Lookup(topic, 0)
		require.True(t, ok)
		require.NoError(t, o.Err)
		lso = o.Offset
		return lso == c.EndOffsets(t, topic)[0]
	})
	return lso
}

// waitCaughtUp waits until standby 0 reflects the changelog up to its last
// stable offset.
func waitCaughtUp(t *testing.T, c *kafkatest.Cluster, m *Manager, errs chan error, topic string) int64 {
	t.Helper()
	end := lastStable(t, c, topic)
	kafkatest.WaitFor(t, 30*time.Second, fmt.Sprintf("standby at the last stable offset %d", end), func() bool {
		select {
		case err := <-errs:
			require.NoError(t, err)
		default:
		}
		return m.Offsets()[0] == end
	})
	return end
}

// TestStandbyAppliesOnlyCommitted: a standby tails a changelog partition
// while its owner commits transactions, aborts others (their records are
// in the log) and leaves one open. The standby's store holds exactly the
// committed state: no aborted write, no write of the open transaction, and
// the committed deletes applied. Its checkpoint reaches the last stable
// offset, past the markers, and its lag is 0.
func TestStandbyAppliesOnlyCommitted(t *testing.T) {
	c := kafkatest.New(t)
	app := kafkatest.Name("standby")
	topic := changelog.Topic(app)
	c.CreateTopic(t, topic, 1)
	o := newOwner(t, c, app)
	// Some state before the standby starts: its first restore.
	o.txn(t, true, "a", "1", "b", "1", "c", "1")
	o.txn(t, false, "a", "ABORTED", "z", "ABORTED")

	m, errs := newManager(t, c, app, t.TempDir())
	require.NoError(t, m.Set([]int32{0}))
	want := map[string]string{"a": "1", "b": "1", "c": "1"}
	waitCaughtUp(t, c, m, errs, topic)
	require.Equal(t, want, m.view(t, 0))

	// Then while it tails.
	for i := range 30 {
		k := fmt.Sprintf("k%d", i%7)
		switch i % 3 {
		case 0, 1:
			v := fmt.Sprintf("v%d", i)
			if i%5 == 4 {
				v = "" // a tombstone
			}
			o.txn(t, true, k, v, "b", fmt.Sprint(i))
			if v == "" {
				delete(want, k)
			} else {
				want[k] = v
			}
			want["b"] = fmt.Sprint(i)
		case 2:
			o.txn(t, false, k, "ABORTED", "c", "", "z", "ABORTED")
		}
	}
	end := waitCaughtUp(t, c, m, errs, topic)
	require.Equal(t, want, m.view(t, 0))

	// An open transaction with records in the log: the last stable offset
	// stays below them and the standby applies none.
	require.NoError(t, o.cl.BeginTransaction())
	o.produce(t, "a", "OPEN", "y", "OPEN")
	time.Sleep(time.Second) // fetches pass over the open transaction
	require.Equal(t, want, m.view(t, 0))
	require.Equal(t, end, m.Offsets()[0])
	require.NoError(t, o.cl.EndTransaction(context.Background(), kgo.TryAbort))
	end = waitCaughtUp(t, c, m, errs, topic)
	require.Equal(t, want, m.view(t, 0), "the open transaction was aborted")

	lag, err := m.Lag(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 0}, lag)

	// The standby's store equals a full restore of the changelog.
	cold, err := store.Open(context.Background(), t.TempDir()+"/cold", store.Options{})
	require.NoError(t, err)
	defer cold.Close()
	_, err = changelog.Restore(context.Background(), c.Adm, topic, 0, cold, kgo.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	coldState := map[string]string{}
	require.NoError(t, cold.Range(func(k, v []byte) bool { coldState[string(k)] = string(v); return true }))
	require.Equal(t, coldState, m.view(t, 0))
	require.Equal(t, end, m.Offsets()[0])
}

// TestReleaseUnlocksTheStore: Release of a standby that is restoring, of
// one that is tailing, and of a task that is no standby here; Set without
// a task and Close. After each, the store's lock is free at once (an
// opener that does not wait gets it) and what was applied is kept.
func TestReleaseUnlocksTheStore(t *testing.T) {
	c := kafkatest.New(t)
	app := kafkatest.Name("release")
	topic := changelog.Topic(app)
	c.CreateTopic(t, topic, 2)
	o := newOwner(t, c, app)
	for i := range 20 {
		require.NoError(t, o.cl.BeginTransaction())
		var recs []*kgo.Record
		for j := range 500 {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "k%d", j), Value: fmt.Appendf(nil, "v%d", i)})
		}
		require.NoError(t, o.cl.ProduceSync(context.Background(), recs...).FirstErr())
		require.NoError(t, o.cl.EndTransaction(context.Background(), kgo.TryCommit))
	}
	dir := t.TempDir()
	free := func(n int32) *store.Store {
		t.Helper()
		st, err := store.Open(context.Background(), store.Dir(dir, app, n), store.Options{ApplicationID: app, LockWait: -1})
		require.NoError(t, err, "the store of %d is not locked", n)
		return st
	}
	m, errs := newManager(t, c, app, dir)

	// Released while it may still be restoring.
	require.NoError(t, m.Set([]int32{0}))
	require.NoError(t, m.Release(0))
	require.NoError(t, free(0).Close())
	require.NoError(t, m.Release(1), "not a standby here")

	// Released while tailing: a warm store of the whole partition.
	require.NoError(t, m.Set([]int32{0, 1}))
	end := waitCaughtUp(t, c, m, errs, topic)
	require.Equal(t, []int32{0, 1}, m.Tasks())
	require.NoError(t, m.Release(0))
	st := free(0)
	cp, ok := st.Checkpoint()
	require.True(t, ok)
	require.Equal(t, end, cp.Next, "the released store keeps its checkpoint")
	v, found, err := st.Get([]byte("k7"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "v19", string(v))
	require.NoError(t, st.Close())

	// Set without a task stops it; Close stops the rest.
	require.NoError(t, m.Set([]int32{0}))
	require.NoError(t, free(1).Close())
	require.NoError(t, m.Close())
	require.NoError(t, free(0).Close())
	require.NoError(t, m.Close(), "a second Close is a no-op")
	require.Empty(t, m.Offsets())
}

// TestStandbyCheckpointAge: a standby whose checkpoint is older than the
// changelog's delete.retention.ms (a tenth kept) when new records arrive
// may have missed a tombstone the cleaner removed: it wipes and restores
// in full. A standby at the end of an idle partition has its checkpoint
// time refreshed and keeps tailing.
func TestStandbyCheckpointAge(t *testing.T) {
	for _, refresh := range []bool{false, true} {
		t.Run(fmt.Sprintf("refresh=%v", refresh), func(t *testing.T) {
			c := kafkatest.New(t)
			app := kafkatest.Name("age")
			topic := changelog.Topic(app)
			c.CreateTopic(t, topic, 1)
			resp, err := c.Adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{
				{Op: kadm.SetConfig, Name: "delete.retention.ms", Value: kadm.StringPtr("3000")},
			}, topic)
			require.NoError(t, err)
			for _, r := range resp {
				require.NoError(t, r.Err)
			}
			o := newOwner(t, c, app)
			o.txn(t, true, "a", "1", "b", "1")

			var logs syncBuffer
			errs := make(chan error, 1)
			every := time.Hour
			if refresh {
				every = 100 * time.Millisecond
			}
			m, err := New(Config{
				ApplicationID: app, Changelog: topic, StateDir: t.TempDir(),
				Admin: c.Adm, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
				TransactionTimeout: time.Second, RefreshEvery: every,
				OnError: func(err error) { errs <- err },
				Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
			})
			require.NoError(t, err)
			defer m.Close()
			require.NoError(t, m.Set([]int32{0}))
			waitCaughtUp(t, c, m, errs, topic)
			time.Sleep(3 * time.Second) // idle past the retention
			o.txn(t, true, "a", "2", "c", "")
			waitCaughtUp(t, c, m, errs, topic)
			require.Equal(t, map[string]string{"a": "2", "b": "1"}, m.view(t, 0))
			if refresh {
				require.NotContains(t, logs.String(), "wiping and restoring", logs.String())
				require.Equal(t, 1, strings.Count(logs.String(), `msg="standby restored"`))
			} else {
				require.Contains(t, logs.String(), "wiping and restoring a standby")
				require.Contains(t, logs.String(), "delete.retention.ms")
				require.Contains(t, logs.String(), "full=true")
			}
		})
	}
}

// TestStandbyWaitsForMarkers: the store of a task this instance just gave
// up reopens as a standby while the old owner's last transaction is not
// stable yet (its records are in the log, its markers are not: the last
// stable offset lies below the store's checkpoint). The standby waits for
// the markers and restores warm from the checkpoint: what the store holds
// is kept, nothing is wiped. Here the transaction is still open when the
// standby starts and commits a second later. A checkpoint above the high
// watermark (ahead of the log itself) is still wiped.
func TestStandbyWaitsForMarkers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ahead int64 // the checkpoint's distance above the high watermark
		want  map[string]string
	}{
		{name: "markers pending", want: map[string]string{"a": "1", "b": "2", "warm": "kept"}},
		{name: "ahead of the log", ahead: 5, want: map[string]string{"a": "1", "b": "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := kafkatest.New(t)
			app := kafkatest.Name("markers")
			topic := changelog.Topic(app)
			c.CreateTopic(t, topic, 1)
			o := newOwner(t, c, app)
			o.txn(t, true, "a", "1")
			require.NoError(t, o.cl.BeginTransaction())
			o.produce(t, "b", "2")
			end := c.EndOffsets(t, topic)[0]

			// The old owner's store: the transaction's write applied,
			// checkpoint after its record, and a key the changelog does
			// not have, which only a wipe removes.
			dir := t.TempDir()
			id, _, err := restore.Describe(ctx, c.Adm, topic)
			require.NoError(t, err)
			st, err := store.Open(ctx, store.Dir(dir, app, 0), store.Options{ApplicationID: app})
			require.NoError(t, err)
			require.NoError(t, st.ApplyCheckpoint([]store.Write{
				{Key: []byte("a"), Value: []byte("1")},
				{Key: []byte("b"), Value: []byte("2")},
				{Key: []byte("warm"), Value: []byte("kept")},
			}, store.Checkpoint{TopicID: id, Next: end + tc.ahead, Time: time.Now()}))
			require.NoError(t, st.Close())

			var logs syncBuffer
			errs := make(chan error, 1)
			m, err := New(Config{
				ApplicationID: app, Changelog: topic, StateDir: dir,
				Admin: c.Adm, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
				TransactionTimeout: time.Minute,
				OnError:            func(err error) { errs <- err },
				Logger:             slog.New(slog.NewTextHandler(&logs, nil)),
			})
			require.NoError(t, err)
			defer m.Close()
			require.NoError(t, m.Set([]int32{0}))
			time.Sleep(time.Second)
			require.NoError(t, o.cl.EndTransaction(ctx, kgo.TryCommit))
			waitCaughtUp(t, c, m, errs, topic)
			require.Equal(t, tc.want, m.view(t, 0), logs.String())
			require.Equal(t, tc.ahead > 0, strings.Contains(logs.String(), "full=true"), logs.String())
		})
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
