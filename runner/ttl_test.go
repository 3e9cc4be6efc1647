package runner

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestStateTTLExpiresOnlyIdleKeys: an application written before timers
// existed (a plain counter, its default changelog) is run again with
// StateTTL (event time) and OnExpire: its state is read as it was (the
// counts go on), keys that stop arriving are expired once stream time is
// the TTL past their last write (OnExpire's output once, then the state
// deleted: gone from the store, a tombstone last in the changelog, their
// expiry timer gone), and keys that keep arriving are never expired (no
// tombstone ever, their counts never restart) though their expiry timers
// fire: each is a hint, moved on to a TTL after the last write.
func TestStateTTLExpiresOnlyIdleKeys(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("ttl")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	dir := t.TempDir()
	opts := []TransformerOpt{SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in), StateDir(dir),
		SessionTimeout(3 * time.Second), CommitInterval(50 * time.Millisecond), WithLogger(testLogger()),
		WithConsumerOpts(kgo.HeartbeatInterval(200 * time.Millisecond))}
	t0 := time.UnixMilli(1_700_000_000_000)
	produced := 0
	produce := func(at time.Time, keys ...string) {
		var recs []*kgo.Record
		for _, k := range keys {
			recs = append(recs, &kgo.Record{Topic: in, Key: []byte(k), Value: []byte("v"), Timestamp: at})
		}
		c.Produce(t, recs...)
		produced += len(recs)
	}
	waitAll := func() {
		kafkatest.WaitFor(t, 60*time.Second, "every input committed", func() bool {
			return c.CommittedOffsets(t, app, in)[0] == int64(produced)
		})
	}
	var keep, stop []string
	for i := range 5 {
		keep = append(keep, fmt.Sprintf("keep-%d", i))
	}
	for i := range 10 {
		stop = append(stop, fmt.Sprintf("stop-%d", i))
	}

	// The old application: a counter with its default store only.
	old := startInstance(t, echoCount(out), opts...)
	produce(t0, append(append([]string{}, keep...), stop...)...)
	waitAll()
	require.NoError(t, old.stop(t))

	const ttl = 300 * time.Millisecond
	counter := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send(out, rec.Key, fmt.Appendf(nil, "%s#%d", rec.Value, n))
		return nil
	}, transformer.StateTTL(ttl, transformer.EventTime),
		transformer.OnExpire(func(_ context.Context, key []byte, n int, o *transformer.Outputs) error {
			o.Send(out, key, fmt.Appendf(nil, "expired#%d", n))
			return nil
		}))
	inst := startInstance(t, counter, opts...)
	// Every key written once more (arming its expiry), then only the
	// keep keys, every 100ms of event time for 3s.
	produce(t0.Add(100*time.Millisecond), append(append([]string{}, keep...), stop...)...)
	for i := 2; i <= 31; i++ {
		produce(t0.Add(time.Duration(i)*100*time.Millisecond), keep...)
	}
	waitAll()
	require.NoError(t, inst.stop(t))

	// The markers of the last transactions may follow their EndTxn.
	c.WaitSettled(t, out)
	c.WaitSettled(t, changelog.Topic(app))
	outs := c.ReadCommitted(t, out)
	got := map[string][]string{}
	for _, o := range outs {
		got[string(o.Key)] = append(got[string(o.Key)], string(o.Value))
	}
	for _, k := range stop {
		require.Equal(t, []string{"v#1", "v#2", "expired#2"}, got[k], "key %s: counted on from the old state, then expired once", k)
	}
	for _, k := range keep {
		require.Len(t, got[k], 32, "key %s", k)
		for i, v := range got[k] {
			require.Equal(t, fmt.Sprintf("v#%d", i+1), v, "key %s never expired", k)
		}
	}

	// The changelog: the stop keys' last record is a tombstone, the keep
	// keys never got one.
	last := map[string]*kgo.Record{}
	for _, r := range c.ReadCommitted(t, changelog.Topic(app)) {
		last[string(r.Key)] = r
		if strings.HasPrefix(string(r.Key), "keep-") {
			require.NotNil(t, r.Value, "a tombstone of %s", r.Key)
		}
	}
	for _, k := range stop {
		require.Nil(t, last[k].Value, "the last changelog record of %s", k)
	}

	// The stores: state of the keep keys only, and their expiry timers.
	st, err := store.Open(context.Background(), config.StoreDir(dir, app, 0), store.Options{ApplicationID: app})
	require.NoError(t, err)
	var keys []string
	require.NoError(t, st.Range(func(k, _ []byte) bool { keys = append(keys, string(k)); return true }))
	require.NoError(t, st.Close())
	require.ElementsMatch(t, keep, keys)
	ts, err := store.Open(context.Background(), store.NamedDir(dir, app, 0, changelog.TimersName), store.Options{ApplicationID: app, Timers: true})
	require.NoError(t, err)
	defer ts.Close()
	var armed []string
	require.NoError(t, ts.Due(uint8(transformer.EventTime), 1<<62, func(key []byte, _ string, due int64) (bool, error) {
		armed = append(armed, string(key))
		// The timer is a hint: not yet due, and at or before the
		// expiry a TTL after the last write.
		last := t0.Add(3100 * time.Millisecond)
		require.Greater(t, due, last.UnixMilli(), "key %s: its expiry timer is not due", key)
		require.LessOrEqual(t, due, last.Add(ttl+ttl/64).UnixMilli(), "key %s expires TTL after its last write, rounded up", key)
		return true, nil
	}))
	require.ElementsMatch(t, keep, armed)
	stream, ok := ts.StreamTime()
	require.True(t, ok)
	require.Equal(t, t0.Add(3100*time.Millisecond).UnixMilli(), stream)
}

// TestTimerSetAgainAtItsDueWritesNothing: a timer set again at the due
// time it has (here a window's end, set by every record of the window)
// costs no changelog record after its first transaction, and a state TTL
// written again costs none either (its expiry timer is a hint, moved only
// when it fires): over 20 transactions of one key a minute apart, each
// moving the TTL's expiry beyond its rounding (d/64), the timer changelog
// holds one record of the window timer and one of the expiry. The timer
// still fires once, when stream time reaches it.
func TestTimerSetAgainAtItsDueWritesNothing(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("same-due")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	t0 := time.UnixMilli(1_700_000_000_000).Truncate(time.Hour)
	end := t0.Add(time.Hour)
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		if string(rec.Value) != "flush" {
			e.SetTimer("window", end)
		}
		return nil
	}, transformer.StateTTL(time.Hour, transformer.EventTime), // expires an hour after each write, rounded up to 56.25s
		transformer.OnTimer(func(_ context.Context, tm transformer.Timer, n int, e *transformer.Emitter[int]) error {
			e.Send(out, tm.Key, fmt.Appendf(nil, "%s=%d", tm.Name, n))
			return nil
		}))
	inst := startInstance(t, st, SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in), StateDir(t.TempDir()),
		SessionTimeout(3*time.Second), CommitInterval(20*time.Millisecond), WithLogger(testLogger()),
		WithConsumerOpts(kgo.HeartbeatInterval(200*time.Millisecond)))
	defer func() { require.NoError(t, inst.stop(t)) }()
	for i := range 20 {
		// A transaction each: the next record waits for the commit.
		c.Produce(t, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("v"), Timestamp: t0.Add(time.Duration(i+1) * time.Minute)})
		kafkatest.WaitFor(t, 30*time.Second, "the record committed", func() bool {
			return c.CommittedOffsets(t, app, in)[0] == int64(i+1)
		})
	}
	c.WaitSettled(t, changelog.TimersTopic(app))
	count := map[string]int{}
	for _, r := range c.ReadCommitted(t, changelog.TimersTopic(app)) {
		if key, name, ok := store.DecodeTimerKey(r.Key); ok {
			count[string(key)+"/"+strings.TrimPrefix(name, "\x00")]++
		}
	}
	require.Equal(t, map[string]int{"k/window": 1, "k/ttl": 1}, count, "timer changelog records per timer")

	c.Produce(t, &kgo.Record{Topic: in, Key: []byte("other"), Value: []byte("flush"), Timestamp: end})
	var outs []*kgo.Record
	kafkatest.WaitFor(t, 30*time.Second, "the window timer fired", func() bool {
		outs = c.ReadCommitted(t, out)
		return len(outs) > 0
	})
	require.Len(t, outs, 1)
	require.Equal(t, "window=20", string(outs[0].Value))
}

// TestTransactionOfUnchangedTimersCommits: a transaction whose only
// writes set a timer again at the due time it has (records that neither
// write state nor send outputs nor advance stream time) still commits its
// offsets: it keeps its timer record, since a transaction that sends
// nothing is never ended.
func TestTransactionOfUnchangedTimersCommits(t *testing.T) {
	c := kafkatest.New(t)
	in, app := kafkatest.Name("in"), kafkatest.Name("unchanged")
	c.CreateTopic(t, in, 1)
	t0 := time.UnixMilli(1_700_000_000_000)
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetTimer("w", t0.Add(time.Hour))
		return nil
	}, transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil }))
	inst := startInstance(t, st, SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in), StateDir(t.TempDir()),
		SessionTimeout(3*time.Second), CommitInterval(20*time.Millisecond), WithLogger(testLogger()),
		WithConsumerOpts(kgo.HeartbeatInterval(200*time.Millisecond)))
	defer func() { require.NoError(t, inst.stop(t)) }()
	for i := range 3 {
		c.Produce(t, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("v"), Timestamp: t0})
		kafkatest.WaitFor(t, 30*time.Second, fmt.Sprintf("offset %d committed", i+1), func() bool {
			return c.CommittedOffsets(t, app, in)[0] == int64(i+1)
		})
	}
}

// TestStateTTLStampSurvivesRestore: a key's expiry timer is a hint due a
// TTL after its first write; the time of its last write rides on its
// changelog record. After a restore from the changelog alone (a fresh
// state directory), the hint fires, finds the key written since and moves
// on: the key expires a TTL after its last write, once, and not at the
// hint.
func TestStateTTLStampSurvivesRestore(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("ttl-restore")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	t0 := time.UnixMilli(1_700_000_000_000).Truncate(time.Hour)
	counter := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		return nil
	}, transformer.StateTTL(time.Hour, transformer.EventTime),
		transformer.OnExpire(func(_ context.Context, key []byte, n int, o *transformer.Outputs) error {
			o.Send(out, key, fmt.Appendf(nil, "expired#%d at %d", n, o.StreamTime().Sub(t0)/time.Minute))
			return nil
		}))
	opts := func() []TransformerOpt { return ttlOpts(c, app, in, t.TempDir()) }
	produce := produceCommitted(t, c, app, in, t0)

	first := startInstance(t, counter, opts()...)
	produce("k", 0)              // the expiry's hint: t0+1h
	produce("k", 50*time.Minute) // expires at t0+1h50m (rounded up to 56.25s)
	require.NoError(t, first.stop(t))

	second := startInstance(t, counter, opts()...) // another state directory: a full restore
	produce("other", 61*time.Minute)
	c.WaitSettled(t, out)
	require.Empty(t, c.ReadCommitted(t, out), "the hint fired an hour after the first write: k was written since")
	produce("other", 110*time.Minute)
	c.WaitSettled(t, out)
	require.Empty(t, c.ReadCommitted(t, out), "not yet a TTL after the last write, rounded up")
	produce("other", 111*time.Minute)
	c.WaitSettled(t, out)
	outs := c.ReadCommitted(t, out)
	require.Len(t, outs, 1)
	require.Equal(t, "k", string(outs[0].Key))
	require.Equal(t, "expired#2 at 111", string(outs[0].Value))
	require.NoError(t, second.stop(t))
}

// TestStateTTLRemovedStopsExpiry: a stage run again without StateTTL
// leaves its keys' state alone when their expiry timers, left by the run
// with it, come due.
func TestStateTTLRemovedStopsExpiry(t *testing.T) {
	c := kafkatest.New(t)
	in, app := kafkatest.Name("in"), kafkatest.Name("ttl-removed")
	c.CreateTopic(t, in, 1)
	t0 := time.UnixMilli(1_700_000_000_000).Truncate(time.Hour)
	count := func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		return nil
	}
	noop := transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil })
	dir := t.TempDir()
	opts := ttlOpts(c, app, in, dir)
	produce := produceCommitted(t, c, app, in, t0)
	with := startInstance(t, transformer.New(count, transformer.StateTTL(time.Hour, transformer.EventTime), noop), opts...)
	produce("k", 0)
	require.NoError(t, with.stop(t))

	without := startInstance(t, transformer.New(count, noop), opts...)
	produce("other", 2*time.Hour)
	require.NoError(t, without.stop(t))
	st, err := store.Open(context.Background(), config.StoreDir(dir, app, 0), store.Options{ApplicationID: app})
	require.NoError(t, err)
	defer st.Close()
	v, ok, err := st.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, ok, "k kept its state")
	require.Equal(t, "1", string(v))
	ts, err := store.Open(context.Background(), store.NamedDir(dir, app, 0, changelog.TimersName), store.Options{ApplicationID: app, Timers: true})
	require.NoError(t, err)
	defer ts.Close()
	require.NoError(t, ts.Due(uint8(transformer.EventTime), 1<<62, func(key []byte, name string, _ int64) (bool, error) {
		return false, fmt.Errorf("timer %q of %s left after it came due", name, key)
	}))
}

// TestStateTTLClockChangeKeepsWrittenKeys: k is written at t0 (its
// expiry hint: t0+1h) and at t0+50m; the stage restarts with
// StateTTL(1h, WallClock). When stream time reaches t0+61m the
// event-time hint fires and finds a stamp of the other clock: k is not
// expired (it was written minutes ago); its expiry counts from then.
func TestStateTTLClockChangeKeepsWrittenKeys(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("ttl-clock")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	t0 := time.UnixMilli(1_700_000_000_000).Truncate(time.Hour)
	counter := func(kind transformer.TimeKind) *transformer.Stage[int] {
		return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
			e.SetState(n + 1)
			return nil
		}, transformer.StateTTL(time.Hour, kind),
			transformer.OnExpire(func(_ context.Context, key []byte, n int, o *transformer.Outputs) error {
				o.Send(out, key, fmt.Appendf(nil, "expired#%d", n))
				return nil
			}))
	}
	dir := t.TempDir()
	opts := ttlOpts(c, app, in, dir)
	produce := produceCommitted(t, c, app, in, t0)
	first := startInstance(t, counter(transformer.EventTime), opts...)
	produce("k", 0)
	produce("k", 50*time.Minute)
	require.NoError(t, first.stop(t))

	second := startInstance(t, counter(transformer.WallClock), opts...)
	produce("other", 61*time.Minute)
	c.WaitSettled(t, out)
	outs := c.ReadCommitted(t, out)
	require.NoError(t, second.stop(t))
	require.Empty(t, outs, "k was written 11 minutes (event time) / seconds (wall clock) ago")
}

// TestStateTTLToggledCountsFromTheHint: k written at 0 and 50m with
// StateTTL(1h); a run without StateTTL writes k at 55m (dropping its
// stamp); the stage runs again with StateTTL: at 61m the leftover hint
// (t0+1h) finds no stamp and does not expire k, written 6 minutes
// before; k expires, once, a TTL (rounded up) after that hint fired.
func TestStateTTLToggledCountsFromTheHint(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("ttl-toggle")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	t0 := time.UnixMilli(1_700_000_000_000).Truncate(time.Hour)
	count := func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		return nil
	}
	withTTL := func() *transformer.Stage[int] {
		return transformer.New(count, transformer.StateTTL(time.Hour, transformer.EventTime),
			transformer.OnExpire(func(_ context.Context, key []byte, n int, o *transformer.Outputs) error {
				o.Send(out, key, fmt.Appendf(nil, "expired#%d", n))
				return nil
			}))
	}
	noop := transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil })
	dir := t.TempDir()
	opts := ttlOpts(c, app, in, dir)
	produce := produceCommitted(t, c, app, in, t0)
	a := startInstance(t, withTTL(), opts...)
	produce("k", 0)
	produce("k", 50*time.Minute)
	require.NoError(t, a.stop(t))
	b := startInstance(t, transformer.New(count, noop), opts...)
	produce("k", 55*time.Minute)
	require.NoError(t, b.stop(t))
	c3 := startInstance(t, withTTL(), opts...)
	produce("other", 61*time.Minute)
	c.WaitSettled(t, out)
	require.Empty(t, c.ReadCommitted(t, out), "k was written 6 minutes ago")
	produce("other", 61*time.Minute+time.Hour)
	c.WaitSettled(t, out)
	require.Empty(t, c.ReadCommitted(t, out), "not yet a TTL after the hint fired, rounded up")
	produce("other", 62*time.Minute+time.Hour)
	c.WaitSettled(t, out)
	outs := c.ReadCommitted(t, out)
	require.NoError(t, c3.stop(t))
	require.Len(t, outs, 1)
	require.Equal(t, "k", string(outs[0].Key))
	require.Equal(t, "expired#3", string(outs[0].Value))
}

// ttlOpts are the options of the TTL tests' instances of app over in,
// with state in dir.
func ttlOpts(c *kafkatest.Cluster, app, in, dir string) []TransformerOpt {
	return []TransformerOpt{SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in), StateDir(dir),
		SessionTimeout(3 * time.Second), CommitInterval(20 * time.Millisecond), WithLogger(testLogger()),
		WithConsumerOpts(kgo.HeartbeatInterval(200 * time.Millisecond))}
}

// produceCommitted returns a func that produces a record of key to
// partition 0 of in, stamped at after t0, and waits until app committed
// it: one transaction per record.
func produceCommitted(t *testing.T, c *kafkatest.Cluster, app, in string, t0 time.Time) func(key string, at time.Duration) {
	produced := 0
	return func(key string, at time.Duration) {
		t.Helper()
		c.Produce(t, &kgo.Record{Topic: in, Key: []byte(key), Value: []byte("v"), Timestamp: t0.Add(at)})
		produced++
		kafkatest.WaitFor(t, 30*time.Second, "the record committed", func() bool {
			return c.CommittedOffsets(t, app, in)[0] == int64(produced)
		})
	}
}

// TestTimerMovedLaterWritesNoTimerRecord: a session timer that every
// record of its key moves later (here with a state TTL) is carried by the
// key's state: over 20 transactions of one key a minute apart, within
// its 30-minute timeout, the timer changelog holds one record of it (its
// first due time, a hint; it is moved when that comes due, about once
// per timeout) and one of the expiry. After a restore from the changelogs alone (a fresh state
// directory), the timer does not fire at its first due time, and fires
// once at its last, with that due time.
func TestTimerMovedLaterWritesNoTimerRecord(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("moved")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	t0 := time.UnixMilli(1_700_000_000_000).Truncate(time.Hour)
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		if string(rec.Key) == "k" {
			e.SetState(n + 1)
			e.SetTimer("session", rec.Timestamp.Add(30*time.Minute))
		}
		return nil
	}, transformer.StateTTL(time.Hour, transformer.EventTime),
		transformer.OnTimer(func(_ context.Context, tm transformer.Timer, n int, e *transformer.Emitter[int]) error {
			e.Send(out, tm.Key, fmt.Appendf(nil, "%s=%d due %d", tm.Name, n, tm.Due.Sub(t0)/time.Minute))
			return nil
		}))
	opts := func() []TransformerOpt { return ttlOpts(c, app, in, t.TempDir()) }
	produce := produceCommitted(t, c, app, in, t0)

	first := startInstance(t, st, opts()...)
	for i := range 20 {
		produce("k", time.Duration(i+1)*time.Minute)
	}
	require.NoError(t, first.stop(t))
	c.WaitSettled(t, changelog.TimersTopic(app))
	count := map[string]int{}
	for _, r := range c.ReadCommitted(t, changelog.TimersTopic(app)) {
		if key, name, ok := store.DecodeTimerKey(r.Key); ok {
			count[string(key)+"/"+strings.TrimPrefix(name, "\x00")]++
		}
	}
	require.Equal(t, map[string]int{"k/session": 1, "k/ttl": 1}, count, "timer changelog records per timer")

	second := startInstance(t, st, opts()...) // another state directory: a full restore
	produce("other", 31*time.Minute)
	c.WaitSettled(t, out)
	require.Empty(t, c.ReadCommitted(t, out), "the timer's first due time: it was moved since")
	produce("other", 49*time.Minute)
	c.WaitSettled(t, out)
	require.Empty(t, c.ReadCommitted(t, out), "not yet due")
	produce("other", 51*time.Minute)
	c.WaitSettled(t, out)
	outs := c.ReadCommitted(t, out)
	require.Len(t, outs, 1)
	require.Equal(t, "session=20 due 50", string(outs[0].Value))
	require.NoError(t, second.stop(t))
}
