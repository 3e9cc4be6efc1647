package transformertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// TestCarriedTimerClockChangeSameBatch: a record that replaces an
// event-time timer by a wall-clock one of the same name (with a state
// write) keeps the old due time from firing later in the same batch.
func TestCarriedTimerClockChangeSameBatch(t *testing.T) {
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		if string(rec.Value) == "wall" {
			e.SetWallTimer("x", e.Now().Add(time.Hour))
		} else if string(rec.Value) == "et" {
			e.SetTimer("x", rec.Timestamp.Add(10*time.Second))
		}
		return nil
	}, transformer.OnTimer(func(_ context.Context, tm transformer.Timer, n int, e *transformer.Emitter[int]) error {
		e.Send("fired", tm.Key, []byte(tm.Name))
		return nil
	}))
	d, err := transformertest.New(st)
	require.NoError(t, err)
	d.SetNow(time.UnixMilli(5_000_000_000_000))
	ctx := context.Background()
	_, err = d.Process(ctx, at("in", "a", "et", t0))
	require.NoError(t, err)
	b, err := d.Process(ctx, at("in", "a", "wall", t0.Add(time.Second)), at("in", "b", "", t0.Add(20*time.Second)))
	require.NoError(t, err)
	require.Empty(t, b.Fired, "the replaced event-time timer fired")
	require.Len(t, d.Timers(0, []byte("a")), 1)
	require.Equal(t, transformer.WallClock, d.Timers(0, []byte("a"))[0].Kind)
}
