package task

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestCarriedTimerAfterStatelessRun: a run of the stage as a stateless
// stage with stores (transformer.Stateless + Stores) opens the timer
// store but not the default store: a carried timer that comes due then
// is fired (nothing runs) and removed from the timer store, while the
// state's stamp, which that run cannot see, still carries it. Run
// stateful again, the key's first write hints the timers its stamp
// carries, so a later set of the timer that the stamp seems to hold
// fires.
func TestCarriedTimerAfterStatelessRun(t *testing.T) {
	dir := t.TempDir()
	h := carriedOpen(t, dir, true)
	h.run(carriedRec("k", "", 1000))
	h.run(carriedRec("k", "et:1100", 1010)) // k has state: x carried, timer at 1100
	h.commitOpen()
	h.run(carriedRec("k", "et:1300", 1020)) // a hint: the timer stays at 1100
	h.commitOpen()
	h.close()

	// The stage run stateless, with a store: x of k comes due at 1100,
	// nothing runs, its timer goes; k's stamp still carries x@1300.
	sl := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil }, transformer.Stores())
	tr, ok := stage.TransformerOf(sl)
	require.True(t, ok)
	require.NoError(t, tr.Validate(), "a valid stage")
	tim, err := store.Open(context.Background(), filepath.Join(dir, "timers"), store.Options{Timers: true})
	require.NoError(t, err)
	hs := &fuzzHarness{t: t, dir: dir, tk: &Task{stores: []*store.Store{nil}, topics: []string{"c"}, names: []string{""}, timers: tim, proc: tr, sp: tr.(process.Stores)}}
	hs.tk.open = newOpen(1)
	hs.tk.stream, _ = tim.StreamTime()
	hs.run(carriedRec("o", "", 1200))
	hs.commitOpen()
	require.NoError(t, tim.Close())

	h = carriedOpen(t, dir, true)
	defer h.close()
	h.run(carriedRec("k", "", 1210)) // a put: the stamp, recent now, carries the stale x@1300
	h.commitOpen()
	h.run(carriedRec("k", "et:1500", 1220)) // a hint the recent stamp seems to cover
	h.commitOpen()
	out := h.run(carriedRec("o", "", 1600))
	h.commitOpen()
	require.Equal(t, []string{"fired x 1500"}, out, "x set to 1500 did not fire")
}

// TestWallTTLAfterClockAhead: a wall-clock stamp from a clock ahead of
// this one (a previous owner's, or this machine's before it stepped
// back) is kept, recent, by a write that only moves a carried timer; the
// next SetState, stamped by this clock, expires earlier, so its hint
// must not be skipped for the recent stamp's: the key's expiry timer is
// due no later than its stamp implies.
func TestWallTTLAfterClockAhead(t *testing.T) {
	const ttl = time.Minute
	dir := t.TempDir()
	// The counter of rerunStage: "t:D" only moves x to D, "" counts.
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		if ms, ok := strings.CutPrefix(string(rec.Value), "t:"); ok {
			d, _ := strconv.ParseInt(ms, 10, 64)
			e.SetTimer("x", time.UnixMilli(d))
			return nil
		}
		e.SetState(n + 1)
		return nil
	},
		transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil }),
		transformer.StateTTL(ttl, transformer.WallClock))
	exp := func(at int64) int64 { // expiryDue for a 1 min TTL
		g := ttl.Milliseconds() / 64
		return (at + ttl.Milliseconds() + g - 1) / g * g
	}

	// What the previous owner, whose clock was 10 minutes ahead,
	// committed: k's state stamped at its time, carrying x, and the
	// timers.
	ahead := time.Now().Add(10 * time.Minute).UnixMilli()
	def, err := store.Open(context.Background(), filepath.Join(dir, "default"), store.Options{})
	require.NoError(t, err)
	sb := stamp.Append(nil, process.Stamp{Kind: process.WallClock, At: ahead, Timers: []process.Timer{{Name: "x", Kind: process.EventTime, Due: 5000}}})
	require.NoError(t, def.Apply([]store.Write{{Key: []byte("k"), Value: []byte("1"), Stamp: sb}}))
	require.NoError(t, def.Close())
	tim, err := store.Open(context.Background(), filepath.Join(dir, "timers"), store.Options{Timers: true})
	require.NoError(t, err)
	require.NoError(t, tim.Apply([]store.Write{
		{Key: store.TimerKey([]byte("k"), "\x00ttl"), Value: store.TimerValue(uint8(process.WallClock), exp(ahead))},
		{Key: store.TimerKey([]byte("k"), "x"), Value: store.TimerValue(uint8(process.EventTime), 5000)},
	}))
	require.NoError(t, tim.Close())

	h := &fuzzHarness{t: t, dir: dir, stage: st}
	h.open()
	defer h.close()
	h.run(carriedRec("k", "t:6000", 1000)) // moves x only: keeps the stamp, hints exp(ahead)
	h.commitOpen()
	h.run(carriedRec("k", "", 1010)) // SetState now: expires at exp(now)
	h.commitOpen()

	sb, ok, err := h.tk.stores[0].StampOf([]byte("k"))
	require.NoError(t, err)
	require.True(t, ok)
	s, _ := stamp.Decode(sb)
	require.Less(t, s.At, ahead, "the state is stamped by this clock")
	var due int64
	require.NoError(t, h.tk.timers.KeyTimers([]byte("k"), func(name string, _ uint8, d int64) (bool, error) {
		if name == "\x00ttl" {
			due = d
		}
		return true, nil
	}))
	require.LessOrEqual(t, due, exp(s.At), "k last written at %d expires at %d, its expiry timer is due at %d (%v late)",
		s.At, exp(s.At), due, time.Duration(due-exp(s.At))*time.Millisecond)
}
