package transformertest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

var t0 = time.UnixMilli(1_700_000_000_000)

func at(topic, key, value string, ts time.Time) transformertest.Input {
	in := transformertest.StringInput(topic, 0, key, value)
	in.Timestamp = ts
	return in
}

// session counts a key's clicks and closes its session 10s (event time)
// after the last one, emitting the count.
type session struct{}

func (session) Transform(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
	out.SetState(n + 1)
	out.SetTimer("close", rec.Timestamp.Add(10*time.Second))
	return nil
}

func (session) OnTimer(_ context.Context, t transformer.Timer, n int, out *transformer.Emitter[int]) error {
	out.Send("sessions", t.Key, []byte(strconv.Itoa(n)))
	out.DeleteState()
	return nil
}

func TestTimersEventTime(t *testing.T) {
	d, err := transformertest.New(transformer.From[int](session{}))
	require.NoError(t, err)
	ctx := context.Background()

	_, err = d.Process(ctx, at("clicks", "a", "", t0), at("clicks", "a", "", t0.Add(time.Second)), at("clicks", "b", "", t0.Add(2*time.Second)))
	require.NoError(t, err)
	require.Equal(t, []transformer.Timer{{Key: []byte("a"), Name: "close", Kind: transformer.EventTime, Due: t0.Add(11 * time.Second)}}, d.Timers(0, []byte("a")))
	require.Empty(t, d.Outputs())

	// b at +12s moves stream time past a's timer: a's session closes in
	// the same batch; b's own record re-arms b's timer to +22s.
	b, err := d.Process(ctx, at("clicks", "b", "", t0.Add(12*time.Second)))
	require.NoError(t, err)
	require.Len(t, b.Outputs, 1)
	require.Equal(t, "a", string(b.Outputs[0].Key))
	require.Equal(t, "2", string(b.Outputs[0].Value))
	require.True(t, b.Outputs[0].Timestamp.Equal(t0.Add(11*time.Second)), "an output of a timer gets its due time")
	require.Equal(t, []transformertest.Fired{{Partition: 0, Timer: transformer.Timer{Key: []byte("a"), Name: "close", Kind: transformer.EventTime, Due: t0.Add(11 * time.Second)}}}, b.Fired)
	require.Empty(t, d.Timers(0, []byte("a")), "a fired timer is removed")
	_, ok := d.RawState(0, []byte("a"))
	require.False(t, ok)
	require.Equal(t, t0.Add(12*time.Second), d.StreamTime(0))

	// Stream time only moves with records: nothing fires on a tick.
	b, err = d.Tick(ctx)
	require.NoError(t, err)
	require.Empty(t, b.Outputs)
	b, err = d.AdvanceStreamTime(ctx, t0.Add(22*time.Second))
	require.NoError(t, err)
	require.Len(t, b.Outputs, 1)
	require.Equal(t, "b", string(b.Outputs[0].Key))
	require.Equal(t, "2", string(b.Outputs[0].Value))
	require.Len(t, d.Fired(), 2)
}

func TestTimersWallClock(t *testing.T) {
	st := transformer.New(func(_ context.Context, rec *transformer.Record, _ string, out *transformer.Emitter[string]) error {
		out.SetState(string(rec.Value))
		out.SetWallTimer("remind", out.Now().Add(time.Minute))
		return nil
	}, transformer.StateCodec(transformer.String()), transformer.OnTimer(func(_ context.Context, tm transformer.Timer, s string, out *transformer.Emitter[string]) error {
		out.Send("reminders", tm.Key, []byte(s))
		return nil
	}))
	d, err := transformertest.New(st)
	require.NoError(t, err)
	ctx := context.Background()
	d.SetNow(t0)
	_, err = d.Process(ctx, at("orders", "o1", "pay me", t0))
	require.NoError(t, err)

	d.Advance(59 * time.Second)
	b, err := d.Tick(ctx)
	require.NoError(t, err)
	require.Empty(t, b.Outputs, "not due yet")

	d.Advance(time.Second)
	b, err = d.Tick(ctx)
	require.NoError(t, err)
	require.Len(t, b.Outputs, 1)
	require.Equal(t, "pay me", string(b.Outputs[0].Value))
	require.True(t, b.Outputs[0].Timestamp.Equal(t0.Add(time.Minute)), "a wall-clock timer's output gets the batch's time")
	require.Empty(t, d.Timers(0, []byte("o1")))

	b, err = d.Tick(ctx)
	require.NoError(t, err)
	require.Empty(t, b.Outputs, "a timer fires once")
}

func TestStateTTL(t *testing.T) {
	for _, kind := range []transformer.TimeKind{transformer.EventTime, transformer.WallClock} {
		t.Run(fmt.Sprint(kind), func(t *testing.T) {
			st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
				out.SetState(n + 1)
				return nil
			}, transformer.StateTTL(time.Minute, kind), transformer.OnExpire(func(_ context.Context, key []byte, n int, out *transformer.Outputs) error {
				out.Send("expired", key, []byte(strconv.Itoa(n)))
				return nil
			}))
			d, err := transformertest.New(st)
			require.NoError(t, err)
			ctx := context.Background()
			d.SetNow(t0)
			// "gone" is written once; "alive" keeps arriving every 30s.
			_, err = d.Process(ctx, at("in", "gone", "", t0), at("in", "alive", "", t0))
			require.NoError(t, err)
			exp, ok := d.Expiry(0, "", []byte("gone"))
			require.True(t, ok)
			requireExpiry(t, t0, time.Minute, exp)
			for i := 1; i <= 4; i++ {
				d.Advance(30 * time.Second)
				_, err = d.Process(ctx, at("in", "alive", "", t0.Add(time.Duration(i)*30*time.Second)))
				require.NoError(t, err)
				if _, err = d.Tick(ctx); err != nil {
					require.NoError(t, err)
				}
			}
			require.Equal(t, []transformertest.Expired{{Partition: 0, Key: []byte("gone")}}, d.Expired())
			_, ok = d.RawState(0, []byte("gone"))
			require.False(t, ok, "an expired key leaves the store")
			n, ok, err := transformertest.State[int](d, 0, []byte("alive"))
			require.NoError(t, err)
			require.True(t, ok, "a key that keeps arriving never expires")
			require.Equal(t, 5, n)
			var tombstones []string
			for _, w := range d.Changelog() {
				if w.Delete {
					tombstones = append(tombstones, string(w.Key))
				}
			}
			require.Equal(t, []string{"gone"}, tombstones, "an expired key gets a tombstone, a live one none")
			var exps []string
			for _, o := range d.Outputs() {
				exps = append(exps, o.Topic+":"+string(o.Key)+"="+string(o.Value))
			}
			require.Equal(t, []string{"expired:gone=1"}, exps)
			_, ok = d.Expiry(0, "", []byte("gone"))
			require.False(t, ok)
		})
	}
}

func TestNamedStoresAndCrossKeyReads(t *testing.T) {
	seen := transformer.NewStore[int]("seen", nil)
	names := transformer.NewStore("names", transformer.String(), transformer.StoreTTL(time.Hour, transformer.EventTime))
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
		c, _, err := seen.Get(out, rec.Value)
		if err != nil {
			return err
		}
		if err := seen.Put(out, rec.Value, c+1); err != nil {
			return err
		}
		if c2, _, _ := seen.Get(out, rec.Value); c2 != c+1 {
			return fmt.Errorf("a call reads its own write: got %d", c2)
		}
		if err := names.Put(out, append([]byte("user/"), rec.Key...), string(rec.Value)); err != nil {
			return err
		}
		out.SetState(n + 1)
		var parts []string
		if err := names.Prefix(out, []byte("user/"), func(k []byte, v string) bool {
			parts = append(parts, string(k)+"="+v)
			return true
		}); err != nil {
			return err
		}
		other, found, err := out.StateOf([]byte("x"))
		if err != nil {
			return err
		}
		own, _, _ := out.StateOf(rec.Key)
		out.Send("seen", rec.Key, fmt.Appendf(nil, "%s x=%d/%v own=%d", strings.Join(parts, ","), other, found, own))
		return nil
	}, transformer.Stores(seen, names))
	d, err := transformertest.New(st, transformertest.Concurrency(1))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = d.Process(ctx, at("in", "x", "v1", t0), at("in", "y", "v1", t0))
	require.NoError(t, err)
	b, err := d.Process(ctx, at("in", "y", "v2", t0.Add(time.Minute)))
	require.NoError(t, err)
	var outs []string
	for _, o := range d.Outputs() {
		outs = append(outs, string(o.Key)+": "+string(o.Value))
	}
	require.Equal(t, []string{
		// x reads its own state as set so far.
		"x: user/x=v1 x=1/true own=1",
		// y's bucket does not see x's writes of the same batch.
		"y: user/y=v1 x=0/false own=1",
		// A later batch sees them, committed.
		"y: user/x=v1,user/y=v2 x=1/true own=2",
	}, outs)
	got, err := transformertest.StoreState(d, 0, seen)
	require.NoError(t, err)
	// x and y both wrote seen[v1] = 1 in the first batch: the last bucket wins.
	require.Equal(t, map[string]int{"v1": 1, "v2": 1}, got)
	require.Equal(t, []transformertest.StoreWrite{
		{Store: "seen", Key: []byte("v2"), Value: []byte("1")},
		{Store: "names", Key: []byte("user/y"), Value: []byte("v2")},
	}, b.StoreWrites)

	// The names store expires an entry an hour (event time) after its
	// last write.
	exp, ok := d.Expiry(0, "names", []byte("user/x"))
	require.True(t, ok)
	requireExpiry(t, t0, time.Hour, exp)
	b, err = d.AdvanceStreamTime(ctx, exp)
	require.NoError(t, err)
	require.Equal(t, []transformertest.Expired{{Store: "names", Key: []byte("user/x")}}, b.Expired)
	nm, err := transformertest.StoreState(d, 0, names)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"user/y": "v2"}, nm)
}

func TestStoresValidate(t *testing.T) {
	noop := func(context.Context, *transformer.Record, int, *transformer.Emitter[int]) error { return nil }
	for _, tc := range []struct {
		name string
		opts []transformer.Opt
		want string
	}{
		{"bad name", []transformer.Opt{transformer.Stores(transformer.NewStore[int]("Bad Name", nil))}, `store "Bad Name": a store name must match`},
		{"reserved name", []transformer.Opt{transformer.Stores(transformer.NewStore[int]("timers", nil))}, `"timers" is reserved`},
		{"reserved name lock", []transformer.Opt{transformer.Stores(transformer.NewStore[int]("lock", nil))}, `"lock" is reserved`},
		{"duplicate", []transformer.Opt{transformer.Stores(transformer.NewStore[int]("a", nil), transformer.NewStore[string]("a", nil))}, "listed twice"},
		{"nil store", []transformer.Opt{transformer.Stores((*transformer.Store[int])(nil))}, "store 0 is nil"},
		{"store TTL", []transformer.Opt{transformer.Stores(transformer.NewStore[int]("a", nil, transformer.StoreTTL(0, transformer.EventTime)))}, "StoreTTL: the TTL must be positive"},
		{"state TTL", []transformer.Opt{transformer.StateTTL(-time.Second, transformer.WallClock)}, "StateTTL: the TTL must be positive"},
		{"TTL clock", []transformer.Opt{transformer.StateTTL(time.Second, 9)}, "the clock must be"},
		{"OnTimer type", []transformer.Opt{transformer.OnTimer(func(context.Context, transformer.Timer, string, *transformer.Emitter[string]) error { return nil })}, "OnTimer: callback"},
		{"OnExpire type", []transformer.Opt{transformer.StateTTL(time.Second, transformer.EventTime), transformer.OnExpire(func(context.Context, []byte, string, *transformer.Outputs) error { return nil })}, "OnExpire: callback"},
		{"OnExpire without TTL", []transformer.Opt{transformer.OnExpire(func(context.Context, []byte, int, *transformer.Outputs) error { return nil })}, "needs StateTTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := transformer.New(noop, tc.opts...).Validate()
			require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
			require.ErrorContains(t, err, tc.want)
			_, err = transformertest.New(transformer.New(noop, tc.opts...))
			require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
		})
	}
	t.Run("stateless", func(t *testing.T) {
		err := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil },
			transformer.StateTTL(time.Second, transformer.EventTime)).Validate()
		require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
		require.ErrorContains(t, err, "stateless stage has no state to expire")
	})
	t.Run("stateless with a TTL store", func(t *testing.T) {
		err := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil },
			transformer.Stores(transformer.NewStore[int]("a", nil, transformer.StoreTTL(time.Second, transformer.EventTime)))).Validate()
		require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
		require.ErrorContains(t, err, "needs a stateful stage")
	})
}

func TestTimerMisuseFailsTheCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(out *transformer.Emitter[int])
		opts []transformer.Opt
		want string
	}{
		{"no callback", func(out *transformer.Emitter[int]) { out.SetTimer("t", t0) }, []transformer.Opt{transformer.Stores()}, "no timer callback"},
		{"plain stage", func(out *transformer.Emitter[int]) { out.SetTimer("t", t0) }, nil, "no timer callback"},
		{"state TTL only", func(out *transformer.Emitter[int]) { out.SetTimer("t", t0) }, []transformer.Opt{transformer.StateTTL(time.Hour, transformer.EventTime)}, "no timer callback"},
		{"store TTL only", func(out *transformer.Emitter[int]) { out.SetWallTimer("t", t0) }, []transformer.Opt{transformer.Stores(transformer.NewStore[int]("s", nil, transformer.StoreTTL(time.Hour, transformer.WallClock)))}, "no timer callback"},
		{"reserved name", func(out *transformer.Emitter[int]) { out.SetTimer("\x00x", t0) }, []transformer.Opt{transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil })}, "must not be empty nor start with 0x00"},
		{"empty name", func(out *transformer.Emitter[int]) { out.CancelTimer("") }, []transformer.Opt{transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil })}, "must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := transformertest.New(transformer.New(func(_ context.Context, _ *transformer.Record, _ int, out *transformer.Emitter[int]) error {
				tc.fn(out)
				return nil
			}, tc.opts...))
			require.NoError(t, err)
			_, err = d.Process(context.Background(), at("in", "k", "", t0))
			require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, d.Batches(), "nothing commits")
		})
	}
}

// TestEmptyStoreKeyFailsTheCall: a write of an empty store key (a
// keyless record's key, in a stateless stage) fails the call with a coded
// error instead of reaching the compacted changelog, which refuses it.
func TestEmptyStoreKeyFailsTheCall(t *testing.T) {
	names := transformer.NewStore[string]("names", transformer.String())
	for _, tc := range []struct {
		name  string
		write func(out *transformer.Outputs, key []byte) error
	}{
		{"put", func(out *transformer.Outputs, key []byte) error { return names.Put(out, key, "v") }},
		{"delete", func(out *transformer.Outputs, key []byte) error { names.Delete(out, key); return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := transformertest.New(transformer.Stateless(func(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
				return tc.write(out, rec.Key)
			}, transformer.Stores(names)))
			require.NoError(t, err)
			in := transformertest.Input{Topic: "in", Value: []byte("v"), Timestamp: t0}
			_, err = d.Process(context.Background(), in)
			require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
			require.ErrorContains(t, err, "empty key")
			require.Empty(t, d.Batches(), "nothing commits")
		})
	}
}

func TestTimerCallbackErrorCommitsNothing(t *testing.T) {
	boom := errors.New("boom")
	fail := true
	st := transformer.New(func(_ context.Context, rec *transformer.Record, _ int, out *transformer.Emitter[int]) error {
		out.SetState(1)
		out.SetTimer("t", rec.Timestamp)
		return nil
	}, transformer.OnTimer(func(_ context.Context, _ transformer.Timer, _ int, out *transformer.Emitter[int]) error {
		out.Send("out", nil, []byte("fired"))
		if fail {
			return boom
		}
		return nil
	}))
	d, err := transformertest.New(st)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = d.Process(ctx, at("in", "k", "", t0))
	var te *transformer.TimerError
	require.ErrorAs(t, err, &te)
	require.ErrorIs(t, err, boom)
	require.Empty(t, d.Batches())
	fail = false
	b, err := d.Process(ctx, at("in", "k", "", t0))
	require.NoError(t, err)
	require.Len(t, b.Outputs, 1)
}

func TestPlainStageStaysPlain(t *testing.T) {
	plain, ok := stage.TransformerOf(transformer.New(func(context.Context, *transformer.Record, int, *transformer.Emitter[int]) error { return nil }))
	require.True(t, ok)
	_, isStores := plain.(process.Stores)
	require.False(t, isStores)
	withStores, ok := stage.TransformerOf(transformer.From[int](session{}))
	require.True(t, ok)
	sp, isStores := withStores.(process.Stores)
	require.True(t, isStores, "a Transformer with OnTimer has timers")
	require.True(t, sp.Timers())
	require.Empty(t, sp.Stores())
}

func TestStatelessStoreDedupe(t *testing.T) {
	seen := transformer.NewStore("seen", transformer.String())
	st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
		if _, dup, err := seen.Get(out, rec.Value); err != nil || dup {
			return err
		}
		if string(rec.Value) == "reset" {
			// Delete every id but "keep"; the call's own deletes hide them
			// from its own Range at once.
			if err := seen.Range(out, nil, nil, func(k []byte, _ string) bool {
				if string(k) != "keep" {
					seen.Delete(out, k)
				}
				return true
			}); err != nil {
				return err
			}
			var left []string
			if err := seen.Prefix(out, nil, func(k []byte, _ string) bool { left = append(left, string(k)); return true }); err != nil {
				return err
			}
			out.Send("left", nil, []byte(strings.Join(left, ",")))
			return nil
		}
		out.Send("unique", nil, rec.Value)
		return seen.Put(out, rec.Value, string(rec.Key))
	}, transformer.Stores(seen))
	d, err := transformertest.New(st)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = d.Process(ctx, at("in", "", "a", t0), at("in", "", "keep", t0), at("in", "", "a", t0), at("in", "", "b", t0))
	require.NoError(t, err)
	_, err = d.Process(ctx, at("in", "", "b", t0), at("in", "", "reset", t0), at("in", "", "a", t0))
	require.NoError(t, err)
	var outs []string
	for _, o := range d.Outputs() {
		outs = append(outs, o.Topic+":"+string(o.Value))
	}
	// One bucket (no key): every record sees the writes of the earlier ones.
	require.Equal(t, []string{"unique:a", "unique:keep", "unique:b", "left:keep", "unique:a"}, outs)
	got, err := transformertest.StoreState(d, 0, seen)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "", "keep": ""}, got)
}

func TestRangeStateAndPeriodicTimer(t *testing.T) {
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
		if string(rec.Value) == "del" {
			out.DeleteState()
		} else {
			out.SetState(n + 1)
		}
		var seen []string
		if err := out.RangeState([]byte("k"), []byte("l"), func(k []byte, s int) bool {
			seen = append(seen, fmt.Sprintf("%s=%d", k, s))
			return true
		}); err != nil {
			return err
		}
		out.Send("range", rec.Key, []byte(strings.Join(seen, ",")))
		if string(rec.Key) == "k1" && !out.HadState() {
			out.SetTimer("every-minute", rec.Timestamp.Add(time.Minute))
		}
		return nil
	}, transformer.OnTimer(func(_ context.Context, tm transformer.Timer, n int, out *transformer.Emitter[int]) error {
		// A periodic timer: each firing sets the next.
		out.SetState(n + 100)
		out.SetTimer(tm.Name, tm.Due.Add(time.Minute))
		return nil
	}))
	d, err := transformertest.New(st)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = d.Process(ctx, at("in", "k1", "", t0), at("in", "k2", "", t0), at("in", "x", "", t0))
	require.NoError(t, err)
	b, err := d.Process(ctx, at("in", "k2", "del", t0), at("in", "k3", "", t0))
	require.NoError(t, err)
	var got []string
	for _, o := range b.Outputs {
		got = append(got, string(o.Key)+": "+string(o.Value))
	}
	require.Equal(t, []string{
		"k2: k1=1",           // its own delete hides it
		"k3: k1=1,k2=1,k3=1", // k2's delete is another bucket's: invisible; its own put shows
	}, got)

	// Stream time 2m30s past: the periodic timer fires at +1m and +2m.
	// Each firing sets the next, due in the past, which waits for the
	// next batch (a timer fires at most once per batch).
	b, err = d.AdvanceStreamTime(ctx, t0.Add(150*time.Second))
	require.NoError(t, err)
	require.Len(t, b.Fired, 1)
	b, err = d.Tick(ctx)
	require.NoError(t, err)
	require.Len(t, b.Fired, 1)
	require.True(t, t0.Add(2*time.Minute).Equal(b.Fired[0].Due))
	b, err = d.Tick(ctx)
	require.NoError(t, err)
	require.Empty(t, b.Fired)
	n, _, err := transformertest.State[int](d, 0, []byte("k1"))
	require.NoError(t, err)
	require.Equal(t, 201, n)
	require.True(t, t0.Add(3*time.Minute).Equal(d.Timers(0, []byte("k1"))[0].Due))
}
