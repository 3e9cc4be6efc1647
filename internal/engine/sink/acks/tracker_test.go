package acks

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
)

var tp0 = TopicPartition{Topic: "in", Partition: 0}

func newTracker(t testing.TB, opts ...Opt) *Tracker {
	t.Helper()
	tr, err := New(opts...)
	require.NoError(t, err)
	return tr
}

// register registers offsets on tp and returns their tickets by offset.
func register(t testing.TB, tr *Tracker, tp TopicPartition, offsets ...int64) map[int64]Ticket {
	t.Helper()
	tks := make(map[int64]Ticket, len(offsets))
	for _, o := range offsets {
		tk, err := tr.Register(tp, o)
		require.NoError(t, err)
		tks[o] = tk
	}
	return tks
}

func committable(t testing.TB, tr *Tracker, tp TopicPartition) int64 {
	t.Helper()
	c, ok := tr.Committable(tp)
	require.True(t, ok, "nothing committable on %s", tp)
	return c
}

// step is one action of a watermark scenario: complete (Done) or fan out
// the record at offset, then expect the committable offset.
type step struct {
	done   int64
	fanOut int // -1: Done; else FanOut(k)
	want   int64
}

func TestWatermark(t *testing.T) {
	d := func(o, want int64) step { return step{done: o, fanOut: -1, want: want} }
	f := func(o int64, k int, want int64) step { return step{done: o, fanOut: k, want: want} }
	tests := []struct {
		name    string
		offsets []int64
		start   int64 // committable right after registering
		steps   []step
	}{
		{
			name:    "in order",
			offsets: []int64{0, 1, 2},
			start:   0,
			steps:   []step{d(0, 1), d(1, 2), d(2, 3)},
		},
		{
			name:    "out of order completions",
			offsets: []int64{0, 1, 2, 3, 4},
			start:   0,
			steps:   []step{d(3, 0), d(1, 0), d(4, 0), d(0, 2), d(2, 5)},
		},
		{
			name:    "fan-out 3 commits only after the third completion",
			offsets: []int64{0, 1},
			start:   0,
			steps:   []step{d(1, 0), f(0, 3, 0), d(0, 0), d(0, 0), d(0, 2)},
		},
		{
			name:    "fan-out 0 releases at once",
			offsets: []int64{0, 1, 2},
			start:   0,
			steps:   []step{f(0, 0, 1), f(2, 0, 1), d(1, 3)},
		},
		{
			name:    "nested fan-out: one of three outputs fans out to two",
			offsets: []int64{7},
			start:   7,
			steps:   []step{f(7, 3, 7), f(7, 2, 7), d(7, 7), d(7, 7), d(7, 7), d(7, 8)},
		},
		{
			name:    "gaps: committable is exactly the first uncompleted",
			offsets: []int64{0, 1, 5, 6},
			start:   0,
			steps:   []step{d(0, 1), d(5, 1), d(1, 6), d(6, 7)},
		},
		{
			name:    "gaps: completed after the gap, first uncompleted is past it",
			offsets: []int64{10, 11, 20, 21, 40},
			start:   10,
			steps:   []step{d(10, 11), d(11, 20), d(21, 20), d(20, 40), d(40, 41)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(t)
			tr.Assign(tp0, -1)
			tks := register(t, tr, tp0, tt.offsets...)
			require.Equal(t, tt.start, committable(t, tr, tp0))
			for i, s := range tt.steps {
				var err error
				if s.fanOut < 0 {
					err = tr.Done(tks[s.done])
				} else {
					err = tr.FanOut(tks[s.done], s.fanOut)
				}
				require.NoError(t, err, "step %d", i)
				require.Equal(t, s.want, committable(t, tr, tp0), "step %d (offset %d, fan-out %d)", i, s.done, s.fanOut)
			}
		})
	}
}

func TestWatermarkRingGrowsAndWraps(t *testing.T) {
	tr := newTracker(t)
	tr.Assign(tp0, -1)
	// Keep a window of outstanding records sliding past the initial ring
	// size, completing the oldest but one out of order, so the ring wraps
	// and grows with records outstanding.
	var tks []Ticket
	next := int64(0)
	for round := 0; round < 50; round++ {
		for i := 0; i < 37; i++ {
			tk, err := tr.Register(tp0, next)
			require.NoError(t, err)
			tks = append(tks, tk)
			next += 2
		}
		for len(tks) > 20 {
			require.NoError(t, tr.Done(tks[1]))
			require.NoError(t, tr.Done(tks[0]))
			tks = tks[2:]
		}
		c := committable(t, tr, tp0)
		require.Equal(t, next-2*int64(len(tks)), c)
	}
	for i := len(tks) - 1; i >= 0; i-- {
		require.NoError(t, tr.Done(tks[i]))
	}
	require.Equal(t, next-1, committable(t, tr, tp0))
}

func TestAdvancePastMarkers(t *testing.T) {
	tr := newTracker(t)
	tr.Assign(tp0, -1)
	_, ok := tr.Committable(tp0)
	require.False(t, ok, "nothing fetched, no committed offset: nothing to commit")

	// Offsets 0-2 are records, 3 a commit marker: the poll's position is 4.
	tks := register(t, tr, tp0, 0, 1, 2)
	require.NoError(t, tr.Advance(tp0, 4))
	require.Equal(t, int64(0), committable(t, tr, tp0), "outstanding records hold the watermark")
	for _, o := range []int64{0, 1, 2} {
		require.NoError(t, tr.Done(tks[o]))
	}
	require.Equal(t, int64(4), committable(t, tr, tp0), "the marker after the last record is not waited on")

	require.NoError(t, tr.Advance(tp0, 3), "advancing backwards is ignored")
	require.Equal(t, int64(4), committable(t, tr, tp0))

	_, err := tr.Register(tp0, 3)
	require.ErrorIs(t, err, ErrOutOfOrder, "an offset below the fetch position")
	require.ErrorContains(t, err, "in[0] offset 3")

	// A partition of only markers (an aborted transaction) still advances.
	tp1 := TopicPartition{Topic: "in", Partition: 1}
	tr.Assign(tp1, 5)
	require.NoError(t, tr.Advance(tp1, 9))
	require.Equal(t, int64(9), committable(t, tr, tp1))
}

func TestCommitFloor(t *testing.T) {
	tests := []struct {
		name    string
		floor   int64
		offsets []int64
		done    []int64
		want    int64
	}{
		{name: "replay below the floor, nothing done", floor: 100, offsets: []int64{90, 91, 92}, want: 100},
		{name: "replay below the floor, all done", floor: 100, offsets: []int64{90, 91}, done: []int64{90, 91}, want: 100},
		{name: "replay crossing the floor, stuck below", floor: 100, offsets: []int64{98, 99, 100, 101}, done: []int64{98, 100, 101}, want: 100},
		{name: "replay crossing the floor, past it", floor: 100, offsets: []int64{98, 99, 100, 101}, done: []int64{98, 99, 100}, want: 101},
		{name: "no replay", floor: 100, offsets: []int64{100, 101}, done: []int64{100}, want: 101},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(t)
			tr.Assign(tp0, tt.floor)
			require.Equal(t, tt.floor, committable(t, tr, tp0))
			tks := register(t, tr, tp0, tt.offsets...)
			for _, o := range tt.done {
				require.NoError(t, tr.Done(tks[o]))
			}
			require.Equal(t, tt.want, committable(t, tr, tp0))
			all := tr.All()
			require.Equal(t, []Offset{{Topic: "in", Partition: 0, Offset: tt.want}}, all)
			for _, o := range all {
				require.GreaterOrEqual(t, o.Offset, tt.floor, "never below the floor")
			}
		})
	}
}

// fakeClock is a settable clock for keepalive tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestKeepalive(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_000_000, 0)}
	tr := newTracker(t, CommitKeepalive(10*time.Minute), WithClock(clk.Now))
	idle := TopicPartition{Topic: "in", Partition: 0}
	busy := TopicPartition{Topic: "in", Partition: 1}
	none := TopicPartition{Topic: "in", Partition: 2} // no committed offset, nothing fetched
	tr.Assign(idle, 42)
	tr.Assign(busy, 0)
	tr.Assign(none, -1)

	require.Empty(t, tr.Keepalive(), "just assigned")
	clk.Add(9 * time.Minute)
	require.Empty(t, tr.Keepalive(), "before CommitKeepalive")

	// busy makes progress and is committed through Changed at 9 min.
	tk, err := tr.Register(busy, 0)
	require.NoError(t, err)
	require.NoError(t, tr.Done(tk))
	require.Equal(t, []Offset{{Topic: "in", Partition: 1, Offset: 1}}, tr.Changed())

	clk.Add(time.Minute) // 10 min: idle is due, busy was reported 1 min ago
	require.Equal(t, []Offset{{Topic: "in", Partition: 0, Offset: 42}}, tr.Keepalive())
	require.Empty(t, tr.Keepalive(), "reported: not due again at once")
	require.Empty(t, tr.Changed(), "a keepalive is no change")

	clk.Add(9 * time.Minute) // 19 min: busy is due (last reported at 9 min)
	require.Equal(t, []Offset{{Topic: "in", Partition: 1, Offset: 1}}, tr.Keepalive())

	clk.Add(time.Minute) // 20 min: idle is due again
	require.Equal(t, []Offset{{Topic: "in", Partition: 0, Offset: 42}}, tr.Keepalive())

	clk.Add(time.Hour)
	require.Equal(t, []Offset{
		{Topic: "in", Partition: 0, Offset: 42},
		{Topic: "in", Partition: 1, Offset: 1},
	}, tr.Keepalive(), "a partition with nothing to commit is never reported")
}

func TestChangedCoalesces(t *testing.T) {
	tr := newTracker(t)
	a0 := TopicPartition{Topic: "a", Partition: 0}
	a1 := TopicPartition{Topic: "a", Partition: 1}
	b0 := TopicPartition{Topic: "b", Partition: 0}
	tr.Assign(a0, 5)
	tr.Assign(a1, -1)
	tr.Assign(b0, -1)
	require.Empty(t, tr.Changed(), "the floor is already committed")

	// One poll cycle: many completions on a0 and b0, one commit each.
	ta := register(t, tr, a0, 5, 6, 7, 8)
	tb := register(t, tr, b0, 0, 1)
	for _, o := range []int64{5, 6, 7} {
		require.NoError(t, tr.Done(ta[o]))
	}
	require.NoError(t, tr.Done(tb[0]))
	require.Equal(t, []Offset{
		{Topic: "a", Partition: 0, Offset: 8},
		{Topic: "b", Partition: 0, Offset: 1},
	}, tr.Changed())
	require.Empty(t, tr.Changed(), "nothing moved since the last call")

	// A registration alone moves nothing (the outstanding record holds it).
	t1 := register(t, tr, a1, 3)
	require.Equal(t, []Offset{{Topic: "a", Partition: 1, Offset: 3}}, tr.Changed(), "first offset of a partition without a committed offset")
	require.NoError(t, tr.Done(t1[3]))
	require.NoError(t, tr.Done(tb[1]))
	require.Equal(t, []Offset{
		{Topic: "a", Partition: 1, Offset: 4},
		{Topic: "b", Partition: 0, Offset: 2},
	}, tr.Changed())

	// A failed async commit comes back in the next Changed; a failure
	// reported for an offset that has since moved on changes nothing.
	tr.CommitFailed(Offset{Topic: "a", Partition: 1, Offset: 4}, Offset{Topic: "b", Partition: 0, Offset: 1})
	require.Equal(t, []Offset{{Topic: "a", Partition: 1, Offset: 4}}, tr.Changed())

	// All returns every committable offset, changed or not.
	require.Equal(t, []Offset{
		{Topic: "a", Partition: 0, Offset: 8},
		{Topic: "a", Partition: 1, Offset: 4},
		{Topic: "b", Partition: 0, Offset: 2},
	}, tr.All())

	require.Equal(t, map[string]map[int32]kgo.EpochOffset{
		"a": {0: {Epoch: -1, Offset: 8}, 1: {Epoch: -1, Offset: 4}},
		"b": {0: {Epoch: -1, Offset: 2}},
	}, EpochOffsets(tr.All()))
}

func TestRevoke(t *testing.T) {
	tr := newTracker(t)
	tr.Assign(tp0, -1)
	tks := register(t, tr, tp0, 0, 1)
	require.NoError(t, tr.Done(tks[0]))
	off, ok := tr.Revoke(tp0)
	require.True(t, ok)
	require.Equal(t, Offset{Topic: "in", Partition: 0, Offset: 1}, off)

	require.NoError(t, tr.Done(tks[1]), "a completion after revocation is a no-op")
	_, err := tr.Register(tp0, 2)
	require.ErrorIs(t, err, ErrNotAssigned)
	require.Empty(t, tr.All())

	// Reassigned: old tickets do not touch the new assignment.
	tr.Assign(tp0, 1)
	tks2 := register(t, tr, tp0, 1)
	require.NoError(t, tr.Done(tks[1]))
	require.Equal(t, int64(1), committable(t, tr, tp0))
	require.NoError(t, tr.Done(tks2[1]))
	require.Equal(t, int64(2), committable(t, tr, tp0))
}

func TestMisuse(t *testing.T) {
	tr := newTracker(t)
	tr.Assign(tp0, -1)
	tks := register(t, tr, tp0, 0, 1)

	_, err := tr.Register(tp0, 1)
	require.ErrorIs(t, err, ErrOutOfOrder, "registered twice")
	_, err = tr.Register(TopicPartition{Topic: "other"}, 0)
	require.ErrorIs(t, err, ErrNotAssigned)
	require.ErrorContains(t, err, "other[0]")
	require.ErrorIs(t, tr.Advance(TopicPartition{Topic: "other"}, 1), ErrNotAssigned)

	require.ErrorIs(t, tr.FanOut(tks[1], -1), ErrInvalidFanOut)
	require.ErrorIs(t, tr.Done(Ticket{}), ErrZeroTicket)

	require.NoError(t, tr.Done(tks[1]))
	err = tr.Done(tks[1])
	require.ErrorIs(t, err, ErrAlreadyComplete, "completed but not yet popped")
	require.ErrorContains(t, err, "in[0] offset 1")
	require.Equal(t, int64(0), committable(t, tr, tp0), "an extra completion does not move the watermark")

	require.NoError(t, tr.Done(tks[0]))
	require.ErrorIs(t, tr.Done(tks[0]), ErrAlreadyComplete, "completed and popped")
	require.ErrorIs(t, tr.FanOut(tks[0], 2), ErrAlreadyComplete)
	require.Equal(t, int64(2), committable(t, tr, tp0))
}

func TestNewValidates(t *testing.T) {
	_, err := New(CommitKeepalive(0), WithClock(nil))
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	var ce *flechtwerk.ConfigError
	require.True(t, errors.As(err, &ce))
	require.ErrorContains(t, err, "CommitKeepalive")
	require.ErrorContains(t, err, "WithClock", "every problem at once")
}

func TestConcurrentCompletions(t *testing.T) {
	const (
		partitions = 4
		records    = 5000
		fanOut     = 3
		workers    = 8
	)
	tr := newTracker(t)
	tps := make([]TopicPartition, partitions)
	for i := range tps {
		tps[i] = TopicPartition{Topic: "in", Partition: int32(i)}
		tr.Assign(tps[i], -1)
	}

	// The source registers and fans out; sink workers complete each output
	// in whatever order they get to it; a committer collects meanwhile and
	// checks the offsets never go backwards.
	work := make(chan Ticket, 256)
	var wg sync.WaitGroup
	var doneErrs atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tk := range work {
				if err := tr.Done(tk); err != nil {
					doneErrs.Add(1)
				}
			}
		}()
	}
	var stop atomic.Bool
	last := make(map[TopicPartition]int64)
	committerDone := make(chan error)
	go func() {
		for !stop.Load() {
			for _, o := range tr.Changed() {
				tp := TopicPartition{Topic: o.Topic, Partition: o.Partition}
				if prev, ok := last[tp]; ok && o.Offset < prev {
					committerDone <- fmt.Errorf("%s went back from %d to %d", tp, prev, o.Offset)
					return
				}
				last[tp] = o.Offset
			}
		}
		committerDone <- nil
	}()
	for off := int64(0); off < records; off++ {
		for _, tp := range tps {
			tk, err := tr.Register(tp, 2*off) // gaps between records
			require.NoError(t, err)
			k := int(off % (fanOut + 1)) // 0..3 outputs
			require.NoError(t, tr.FanOut(tk, k))
			for i := 0; i < k; i++ {
				work <- tk
			}
		}
	}
	close(work)
	wg.Wait()
	stop.Store(true)
	require.NoError(t, <-committerDone)
	require.Zero(t, doneErrs.Load(), "failed completions")

	for _, tp := range tps {
		require.NoError(t, tr.Advance(tp, 2*records))
	}
	want := make([]Offset, partitions)
	for i := range want {
		want[i] = Offset{Topic: "in", Partition: int32(i), Offset: 2 * records}
	}
	require.Equal(t, want, tr.All())
}

func BenchmarkRegisterDone(b *testing.B) {
	tr := newTracker(b)
	tr.Assign(tp0, -1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk, err := tr.Register(tp0, int64(i))
		if err != nil {
			b.Fatal(err)
		}
		if err := tr.Done(tk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRegisterDoneWindow keeps 1000 records outstanding and completes
// them oldest-first: the steady state of a sink flushing in batches.
func BenchmarkRegisterDoneWindow(b *testing.B) {
	tr := newTracker(b)
	tr.Assign(tp0, -1)
	const window = 1000
	tks := make([]Ticket, window)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i >= window {
			if err := tr.Done(tks[i%window]); err != nil {
				b.Fatal(err)
			}
		}
		tk, err := tr.Register(tp0, int64(i))
		if err != nil {
			b.Fatal(err)
		}
		tks[i%window] = tk
	}
}

// BenchmarkDoneParallel completes from several goroutines across 8
// partitions, as sink goroutines do.
func BenchmarkDoneParallel(b *testing.B) {
	tr := newTracker(b)
	var pick atomic.Int64
	for p := int32(0); p < 8; p++ {
		tr.Assign(TopicPartition{Topic: "in", Partition: p}, -1)
	}
	// Register needs increasing offsets per partition.
	var mu [8]sync.Mutex
	var next [8]int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := int32(pick.Add(1) % 8)
			mu[p].Lock()
			tk, err := tr.Register(TopicPartition{Topic: "in", Partition: p}, next[p])
			next[p]++
			mu[p].Unlock()
			if err != nil {
				b.Fatal(err)
			}
			if err := tr.Done(tk); err != nil {
				b.Fatal(err)
			}
		}
	})
}
