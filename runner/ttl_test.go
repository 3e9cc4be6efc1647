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
// tombstone ever, their counts never restart).
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
		last := t0.Add(3100 * time.Millisecond)
		require.GreaterOrEqual(t, due, last.Add(ttl).UnixMilli(), "key %s expires TTL after its last write", key)
		require.LessOrEqual(t, due, last.Add(ttl+ttl/64).UnixMilli(), "key %s expires TTL after its last write, rounded up", key)
		return true, nil
	}))
	require.ElementsMatch(t, keep, armed)
	stream, ok := ts.StreamTime()
	require.True(t, ok)
	require.Equal(t, t0.Add(3100*time.Millisecond).UnixMilli(), stream)
}

// TestTimerSetAgainAtItsDueWritesNothing: a timer set again at the due
// time it has (here a window's end, set by every record of the window) and
// a state TTL armed again within its rounding (d/64) cost no changelog
// record after their first transaction: over 20 transactions of one key,
// the timer changelog holds one record of the window timer and one of the
// expiry. The timer still fires once, when stream time reaches it.
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
	}, transformer.StateTTL(64*time.Hour, transformer.EventTime), // rounded up to the next hour: t0+65h
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
