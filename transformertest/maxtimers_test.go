package transformertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// firedKeys returns the keys of b's fired timers, in firing order.
func firedKeys(b *transformertest.Batch) []string {
	var ks []string
	for _, f := range b.Fired {
		ks = append(ks, string(f.Key))
	}
	return ks
}

// TestMaxTimers: a batch fires at most MaxTimers due timers of keys
// without records, in due order, and says more are due; the keys of its
// records keep all theirs.
func TestMaxTimers(t *testing.T) {
	newDriver := func(t *testing.T) *transformertest.Driver {
		d, err := transformertest.New(transformer.New(func(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
			out.SetState(n + 1)
			if n == 0 {
				out.SetTimer("t", rec.Timestamp.Add(time.Hour))
			}
			return nil
		}, transformer.OnTimer(func(_ context.Context, tm transformer.Timer, _ int, out *transformer.Emitter[int]) error {
			out.Send("fired", tm.Key, nil)
			return nil
		})), transformertest.MaxTimers(2), transformertest.Concurrency(1))
		require.NoError(t, err)
		ctx := context.Background()
		// Timers of a..e due at t0+60m .. t0+64m.
		var in []transformertest.Input
		for i, k := range []string{"a", "b", "c", "d", "e"} {
			in = append(in, at("in", k, "", t0.Add(time.Duration(i)*time.Minute)))
		}
		b, err := d.Process(ctx, in...)
		require.NoError(t, err)
		require.Empty(t, b.Fired)
		require.False(t, b.MoreDue)
		return d
	}
	ctx := context.Background()

	t.Run("ticks", func(t *testing.T) {
		d := newDriver(t)
		b, err := d.AdvanceStreamTime(ctx, t0.Add(2*time.Hour))
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b"}, firedKeys(b))
		require.True(t, b.MoreDue)
		b, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"c", "d"}, firedKeys(b))
		require.True(t, b.MoreDue)
		b, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"e"}, firedKeys(b))
		require.False(t, b.MoreDue)
	})

	t.Run("a record's key keeps its timers", func(t *testing.T) {
		d := newDriver(t)
		// e's timer is the last due, yet it fires in the batch of e's record.
		b, err := d.Process(ctx, at("in", "e", "", t0.Add(2*time.Hour)))
		require.NoError(t, err)
		require.Equal(t, []string{"e", "a", "b"}, firedKeys(b))
		require.True(t, b.MoreDue)
		n, ok, err := transformertest.State[int](d, 0, []byte("e"))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 2, n)
		b, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"c", "d"}, firedKeys(b))
		require.False(t, b.MoreDue)
	})
}
