package task

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// carriedStage counts a key's records and sets its timer "x" at the
// event time "et:MS" gives, or a wall-clock hour ahead ("wall"); with
// withTimer, OnTimer reports the fired timer.
func carriedStage(withTimer bool) *transformer.Stage[int] {
	opts := []transformer.Opt{transformer.StateTTL(time.Hour, transformer.EventTime)}
	if withTimer {
		opts = append(opts, transformer.OnTimer(func(_ context.Context, tm transformer.Timer, n int, e *transformer.Emitter[int]) error {
			e.Send("out", tm.Key, fmt.Appendf(nil, "fired %s %d", tm.Name, tm.Due.UnixMilli()))
			return nil
		}))
	}
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		switch v := string(rec.Value); {
		case v == "wall":
			e.SetWallTimer("x", time.Now().Add(time.Hour))
		case len(v) > 3 && v[:3] == "et:":
			var d int64
			fmt.Sscan(v[3:], &d)
			e.SetTimer("x", time.UnixMilli(d))
		}
		return nil
	}, opts...)
}

// carriedOpen opens a harness of carriedStage on the stores in dir.
func carriedOpen(t *testing.T, dir string, withTimer bool) *fuzzHarness {
	h := &fuzzHarness{t: t, dir: dir, stage: carriedStage(withTimer)}
	h.open()
	return h
}

func carriedRec(key, v string, ts int64) *kgo.Record {
	return &kgo.Record{Topic: "in", Key: []byte(key), Value: []byte(v), Timestamp: time.UnixMilli(ts)}
}

// run processes recs as one batch of the open transaction and returns
// its outputs' values.
func (h *fuzzHarness) run(recs ...*kgo.Record) []string {
	b, err := h.tk.Process(context.Background(), recs, make(chan struct{}, 2))
	require.NoError(h.t, err)
	h.add(b)
	var out []string
	for _, o := range b.outputs {
		out = append(out, string(o.Value))
	}
	return out
}

// TestCarriedTimerClockChange: an event-time timer replaced by a
// wall-clock one in a batch of the open transaction does not fire at its
// old due time in a later batch of the same transaction.
func TestCarriedTimerClockChange(t *testing.T) {
	h := carriedOpen(t, t.TempDir(), true)
	defer h.close()
	h.run(carriedRec("k", "et:1100", 1000))
	h.commitOpen()
	h.run(carriedRec("k", "wall", 1010))    // batch 1 of the open txn
	out := h.run(carriedRec("o", "", 1200)) // batch 2: stream time past 1100
	require.Empty(t, out, "the replaced event-time timer fired")
}

// TestCarriedTimerSurvivesRunWithoutOnTimer: a run without OnTimer that
// writes the key keeps the due time its state carries, so that, run again
// with OnTimer, the timer does not fire at the timer store's earlier one.
func TestCarriedTimerSurvivesRunWithoutOnTimer(t *testing.T) {
	dir := t.TempDir()
	h := carriedOpen(t, dir, true)
	h.run(carriedRec("k", "et:1100", 1000))
	h.commitOpen()
	h.run(carriedRec("k", "et:1300", 1010)) // a hint: the record stays at 1100
	h.commitOpen()
	h.close()
	h = carriedOpen(t, dir, false)
	h.run(carriedRec("k", "", 1020))
	h.commitOpen()
	h.close()
	h = carriedOpen(t, dir, true)
	defer h.close()
	out := h.run(carriedRec("o", "", 1200))
	require.Empty(t, out, "timer set to 1300 fired early")
}

// TestCarriedTimerDueWithoutOnTimerIsGone: a timer that comes due in a
// run without OnTimer is gone from the state's stamp too, so that, run
// again with OnTimer, a new set of it is not taken for one the stamp
// already holds: it fires.
func TestCarriedTimerDueWithoutOnTimerIsGone(t *testing.T) {
	dir := t.TempDir()
	h := carriedOpen(t, dir, true)
	h.run(carriedRec("k", "et:1100", 1000))
	h.commitOpen()
	h.close()
	h = carriedOpen(t, dir, false)
	h.run(carriedRec("o", "", 1200)) // x of k comes due: nothing runs, its record goes
	h.commitOpen()
	h.close()
	h = carriedOpen(t, dir, true)
	defer h.close()
	h.run(carriedRec("k", "", 1210)) // carries the stale x@1100
	h.commitOpen()
	h.run(carriedRec("k", "et:1500", 1220))
	h.commitOpen()
	out := h.run(carriedRec("o", "", 1600))
	require.Equal(t, []string{"fired x 1500"}, out)
}

// TestCarriedTimersBounded: a key's state carries at most maxCarried
// timers (transformer); the others are set where they are due. Moved
// later by a second record, every timer fires once, at its last due time.
func TestCarriedTimersBounded(t *testing.T) {
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		for i := range 10 {
			e.SetTimer(fmt.Sprintf("t%d", i), rec.Timestamp.Add(time.Duration(100+i)*time.Millisecond))
		}
		return nil
	}, transformer.OnTimer(func(_ context.Context, tm transformer.Timer, _ int, e *transformer.Emitter[int]) error {
		e.Send("out", tm.Key, fmt.Appendf(nil, "%s %d", tm.Name, tm.Due.UnixMilli()))
		return nil
	}))
	h := &fuzzHarness{t: t, dir: t.TempDir(), stage: st}
	h.open()
	defer h.close()

	h.run(carriedRec("k", "", 1000)) // no state yet: set where due
	h.commitOpen()
	h.run(carriedRec("k", "", 1050)) // moved later: carried, up to the bound
	h.commitOpen()
	sb, ok, err := h.tk.stores[0].StampOf([]byte("k"))
	require.NoError(t, err)
	require.True(t, ok)
	s, ok := stamp.Decode(sb)
	require.True(t, ok)
	require.Len(t, s.Timers, 8, "the state carries the bound")
	out := h.run(carriedRec("o", "", 2000))
	require.Len(t, out, 10)
	for i := range 10 {
		require.Contains(t, out, fmt.Sprintf("t%d %d", i, 1150+i))
	}
}
