package transformertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

func ttlSessions() *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		if string(rec.Value) == "close" {
			e.SetTimer("close", rec.Timestamp.Add(50*time.Minute))
		}
		return nil
	}, transformer.StateTTL(time.Hour, transformer.EventTime),
		transformer.OnTimer(func(_ context.Context, tm transformer.Timer, n int, e *transformer.Emitter[int]) error {
			e.Send("out", tm.Key, fmt.Appendf(nil, "close had=%v n=%d", e.HadState(), n))
			return nil
		}),
		transformer.OnExpire(func(_ context.Context, key []byte, n int, o *transformer.Outputs) error {
			o.Send("out", key, fmt.Appendf(nil, "expired n=%d", n))
			return nil
		}))
}

// TestStateTTLExpiryOutputTimestamp: k written at 0 and 50m (TTL 1h):
// its expiry is due at 1h50m (rounded up); OnExpire's output without a
// Timestamp gets "the expiry's due time" (OnExpire doc).
func TestStateTTLExpiryOutputTimestamp(t *testing.T) {
	d, err := transformertest.New(ttlSessions())
	require.NoError(t, err)
	ctx := context.Background()
	for _, in := range []transformertest.Input{at("in", "k", "v", t0), at("in", "k", "v", t0.Add(50*time.Minute)), at("in", "other", "v", t0.Add(3*time.Hour))} {
		_, err := d.Process(ctx, in)
		require.NoError(t, err)
	}
	outs := d.Outputs()
	require.Len(t, outs, 1)
	require.Equal(t, "expired n=2", string(outs[0].Value))
	require.False(t, outs[0].Timestamp.Before(t0.Add(110*time.Minute)), "expiry output stamped %v after t0, before the expiry (1h50m)", outs[0].Timestamp.Sub(t0))
}

// TestStateTTLExpiryFiresInDueOrder: k written at 0 and at 50m, which also
// sets timer "close" at 1h40m; the expiry is due at 1h50m. Stream time
// jumps to 3h: "Due timers of one key fire in (Due, Name) order", so
// close (1h40m) fires with k's state, then k expires.
func TestStateTTLExpiryFiresInDueOrder(t *testing.T) {
	d, err := transformertest.New(ttlSessions())
	require.NoError(t, err)
	ctx := context.Background()
	for _, in := range []transformertest.Input{at("in", "k", "v", t0), at("in", "k", "close", t0.Add(50*time.Minute)), at("in", "other", "v", t0.Add(3*time.Hour))} {
		_, err := d.Process(ctx, in)
		require.NoError(t, err)
	}
	var got []string
	for _, o := range d.Outputs() {
		got = append(got, string(o.Value))
	}
	require.Equal(t, []string{"close had=true n=2", "expired n=2"}, got)
}

// TestStateTTLExpiryFiresInDueOrderMaxTimers: as
// TestStateTTLExpiryFiresInDueOrder,
// with one due timer of keys without records per batch (MaxTimers(1)),
// ticking until nothing is due.
func TestStateTTLExpiryFiresInDueOrderMaxTimers(t *testing.T) {
	d, err := transformertest.New(ttlSessions(), transformertest.MaxTimers(1))
	require.NoError(t, err)
	ctx := context.Background()
	for _, in := range []transformertest.Input{at("in", "k", "v", t0), at("in", "k", "close", t0.Add(50*time.Minute)), at("in", "other", "v", t0.Add(3*time.Hour))} {
		_, err := d.Process(ctx, in)
		require.NoError(t, err)
	}
	for range 5 {
		_, err := d.Tick(ctx)
		require.NoError(t, err)
	}
	var got []string
	for _, o := range d.Outputs() {
		got = append(got, string(o.Value))
	}
	require.Equal(t, []string{"close had=true n=2", "expired n=2"}, got)
}
