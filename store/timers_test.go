package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/store"
)

const (
	eventTime = uint8(1)
	wallClock = uint8(2)
)

func TestTimerEncoding(t *testing.T) {
	long := bytes.Repeat([]byte{'k'}, 300) // a two-byte uvarint
	for _, tc := range []struct {
		name string
		key  []byte
		tn   string
	}{
		{"plain", []byte("order-1"), "pay"},
		{"ttl name", []byte("k"), "\x00ttl"},
		{"ttl of a store", []byte("k"), "\x00ttl:counts"},
		{"binary key", []byte{0x00, 0xff, 0x01}, "x"},
		{"long key", long, "n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := store.TimerKey(tc.key, tc.tn)
			require.NotEqual(t, store.StreamTimeKey, k)
			key, name, ok := store.DecodeTimerKey(k)
			require.True(t, ok)
			require.Equal(t, tc.key, key)
			require.Equal(t, tc.tn, name)
		})
	}
	for _, bad := range [][]byte{nil, store.StreamTimeKey, {0x05, 'a'}, {0x80}} {
		_, _, ok := store.DecodeTimerKey(bad)
		require.False(t, ok, "%x", bad)
	}
	for _, due := range []int64{0, 1, -1, math.MinInt64, math.MaxInt64, 1_700_000_000_000} {
		kind, got, ok := store.DecodeTimerValue(store.TimerValue(wallClock, due))
		require.True(t, ok)
		require.Equal(t, wallClock, kind)
		require.Equal(t, due, got)
		ms, ok := store.DecodeStreamTime(store.StreamTimeValue(due))
		require.True(t, ok)
		require.Equal(t, due, ms)
	}
	require.Equal(t, []byte{2, 0, 0, 0, 0, 0, 0, 0, 7}, store.TimerValue(2, 7))
	_, _, ok := store.DecodeTimerValue(make([]byte, 8))
	require.False(t, ok)
	_, ok = store.DecodeStreamTime(make([]byte, 9))
	require.False(t, ok)
}

func openTimers(t testing.TB, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), dir, store.Options{ApplicationID: "app", Timers: true})
	require.NoError(t, err)
	return st
}

type timerEntry struct {
	Kind uint8
	Due  int64
	Key  string
	Name string
}

// dueAll returns Due(kind, upTo) as entries.
func dueAll(t testing.TB, st *store.Store, kind uint8, upTo int64) []timerEntry {
	t.Helper()
	var got []timerEntry
	require.NoError(t, st.Due(kind, upTo, func(key []byte, name string, due int64) (bool, error) {
		got = append(got, timerEntry{kind, due, string(key), name})
		return true, nil
	}))
	return got
}

// fromRecords returns the timers the store's records hold, in Due's order.
func fromRecords(t testing.TB, st *store.Store, kind uint8, upTo int64) []timerEntry {
	t.Helper()
	var want []timerEntry
	require.NoError(t, st.Range(func(k, v []byte) bool {
		if bytes.Equal(k, store.StreamTimeKey) {
			return true
		}
		key, name, ok := store.DecodeTimerKey(k)
		require.True(t, ok)
		kd, due, ok := store.DecodeTimerValue(v)
		require.True(t, ok)
		if kd == kind && due <= upTo {
			want = append(want, timerEntry{kd, due, string(key), name})
		}
		return true
	}))
	slices.SortFunc(want, func(a, b timerEntry) int {
		return store.CompareDue(a.Due, []byte(a.Key), a.Name, b.Due, []byte(b.Key), b.Name)
	})
	return want
}

// requireIndexExact: for both kinds and several bounds, Due lists exactly
// the timers of the store's records, and they are the model's.
func requireIndexExact(t testing.TB, st *store.Store, model map[string][]byte) {
	t.Helper()
	n := 0
	for _, kind := range []uint8{eventTime, wallClock} {
		for _, upTo := range []int64{math.MinInt64, -5, 0, 10, 25, 50, math.MaxInt64} {
			require.Equal(t, fromRecords(t, st, kind, upTo), dueAll(t, st, kind, upTo), "kind %d upTo %d", kind, upTo)
		}
		n += len(dueAll(t, st, kind, math.MaxInt64))
	}
	stored := 0
	require.NoError(t, st.Range(func(k, v []byte) bool {
		if !bytes.Equal(k, store.StreamTimeKey) {
			stored++
		}
		require.Equal(t, model[string(k)], v, "record %q", k)
		return true
	}))
	require.Equal(t, len(model), stored+boolInt(model[string(store.StreamTimeKey)] != nil))
	require.Equal(t, stored, n, "index entries")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestDueIndexExact applies random batches of timer sets, replaces and
// cancels (several writes of one key in a batch among them) through every
// apply path, then replays them from the start and from the middle, as a
// restore or a standby from an older checkpoint does: after every step the
// due index lists exactly the timers the records hold, and survives a
// reopen.
func TestDueIndexExact(t *testing.T) {
	dir := t.TempDir()
	st := openTimers(t, dir)
	defer func() { st.Close() }()
	require.NoError(t, st.Reset([16]byte{1}))
	rng := rand.New(rand.NewPCG(1, 2))
	model := map[string][]byte{}
	var batches [][]store.Write
	apply := func(i int, ws []store.Write) {
		t.Helper()
		cp := store.Checkpoint{TopicID: [16]byte{1}, Next: int64(i + 1)}
		switch i % 4 {
		case 0:
			require.NoError(t, st.Apply(ws))
		case 1:
			require.NoError(t, st.ApplyThrough(ws, int64(i+1)))
		case 2:
			require.NoError(t, st.ApplyCheckpoint(ws, cp))
		case 3:
			require.NoError(t, st.ApplyRestored(ws, cp))
		}
	}
	for i := range 200 {
		var ws []store.Write
		for range 1 + rng.IntN(8) {
			keys := []string{"k0", "k1", "k10", "k2", "\x00", "\x00\x00", "k\x00", "k", "kk", "\xff", "\xff\x00\x01"}
			k := store.TimerKey([]byte(keys[rng.IntN(len(keys))]), []string{"a", "b", "\x00ttl", "\x00ttl:s", "\x01"}[rng.IntN(5)])
			w := store.Write{Key: k}
			if rng.IntN(3) == 0 {
				w.Delete = true
				delete(model, string(k))
			} else {
				w.Value = store.TimerValue(uint8(1+rng.IntN(2)), int64(rng.IntN(60)-10))
				model[string(k)] = w.Value
			}
			ws = append(ws, w)
		}
		if rng.IntN(5) == 0 {
			w := store.Write{Key: store.StreamTimeKey, Value: store.StreamTimeValue(int64(i))}
			ws = append(ws, w)
			model[string(w.Key)] = w.Value
		}
		batches = append(batches, ws)
		apply(i, ws)
		requireIndexExact(t, st, model)
	}
	// Replays of records already applied change nothing.
	for _, from := range []int{0, 100, 199} {
		for i := from; i < len(batches); i++ {
			apply(i, batches[i])
		}
		requireIndexExact(t, st, model)
	}
	// One batch holding every write again, in order.
	require.NoError(t, st.ApplyRestored(slices.Concat(batches...), store.Checkpoint{TopicID: [16]byte{1}, Next: 999}))
	requireIndexExact(t, st, model)

	require.NoError(t, st.Close())
	st = openTimers(t, dir)
	requireIndexExact(t, st, model)
	ms, ok := st.StreamTime()
	want, wantOK := store.DecodeStreamTime(model[string(store.StreamTimeKey)])
	require.Equal(t, wantOK, ok)
	require.Equal(t, want, ms)

	// Reset empties the index and the stream time.
	require.NoError(t, st.Reset([16]byte{2}))
	require.Empty(t, dueAll(t, st, eventTime, math.MaxInt64))
	require.Empty(t, dueAll(t, st, wallClock, math.MaxInt64))
	_, ok = st.StreamTime()
	require.False(t, ok)
}

// TestDueReplaceAndCancel: a replaced timer is listed only at its new due
// time, with its new kind; a cancelled one not at all; a cancel of an
// absent timer is harmless.
func TestDueReplaceAndCancel(t *testing.T) {
	st := openTimers(t, t.TempDir())
	defer st.Close()
	a, b := store.TimerKey([]byte("a"), "t"), store.TimerKey([]byte("b"), "t")
	require.NoError(t, st.ApplyThrough([]store.Write{
		{Key: a, Value: store.TimerValue(eventTime, 10)},
		{Key: b, Value: store.TimerValue(eventTime, 20)},
	}, 2))
	require.Equal(t, []timerEntry{{eventTime, 10, "a", "t"}, {eventTime, 20, "b", "t"}}, dueAll(t, st, eventTime, 20))
	require.Equal(t, []timerEntry{{eventTime, 10, "a", "t"}}, dueAll(t, st, eventTime, 19))

	require.NoError(t, st.ApplyThrough([]store.Write{
		{Key: a, Value: store.TimerValue(eventTime, 30)},
		{Key: b, Value: store.TimerValue(wallClock, 5)},
		{Key: store.TimerKey([]byte("c"), "t"), Delete: true},
	}, 4))
	require.Equal(t, []timerEntry{{eventTime, 30, "a", "t"}}, dueAll(t, st, eventTime, math.MaxInt64))
	require.Equal(t, []timerEntry{{wallClock, 5, "b", "t"}}, dueAll(t, st, wallClock, math.MaxInt64))

	require.NoError(t, st.ApplyThrough([]store.Write{{Key: a, Delete: true}, {Key: a, Delete: true}}, 6))
	require.Empty(t, dueAll(t, st, eventTime, math.MaxInt64))
	due, ok, err := st.NextDue(wallClock)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(5), due)
	_, ok, err = st.NextDue(eventTime)
	require.NoError(t, err)
	require.False(t, ok)
}

// TestDueOrder: ascending by due time (negative ones first), then by
// TimerKey; upTo is inclusive; fn stops the walk or fails it.
func TestDueOrder(t *testing.T) {
	st := openTimers(t, t.TempDir())
	defer st.Close()
	ws := []store.Write{
		{Key: store.TimerKey([]byte("k"), "b"), Value: store.TimerValue(eventTime, 5)},
		{Key: store.TimerKey([]byte("k"), "a"), Value: store.TimerValue(eventTime, 5)},
		{Key: store.TimerKey([]byte("j"), "z"), Value: store.TimerValue(eventTime, 5)},
		{Key: store.TimerKey([]byte("z"), "z"), Value: store.TimerValue(eventTime, -3)},
		{Key: store.TimerKey([]byte("y"), "y"), Value: store.TimerValue(eventTime, math.MaxInt64)},
		{Key: store.TimerKey([]byte("x"), "x"), Value: store.TimerValue(eventTime, math.MinInt64)},
	}
	require.NoError(t, st.Apply(ws))
	require.Equal(t, []timerEntry{
		{eventTime, math.MinInt64, "x", "x"},
		{eventTime, -3, "z", "z"},
		{eventTime, 5, "j", "z"},
		{eventTime, 5, "k", "a"},
		{eventTime, 5, "k", "b"},
		{eventTime, math.MaxInt64, "y", "y"},
	}, dueAll(t, st, eventTime, math.MaxInt64))

	// Among one due time: by state key, bytewise (a key before its
	// extensions, 0x00 bytes included), then by name.
	keys := []string{"\x00", "\x00\x00", "\x00\x01", "a", "a\x00", "a\x00\x00", "a\x00b", "a\x01", "aa", "b", "\xff", "\xff\xff"}
	var ws2 []store.Write
	for i := len(keys) - 1; i >= 0; i-- {
		for _, name := range []string{"\x00ttl", "b", "a"} {
			ws2 = append(ws2, store.Write{Key: store.TimerKey([]byte(keys[i]), name), Value: store.TimerValue(3, 7)})
		}
	}
	require.NoError(t, st.Apply(ws2))
	var want []timerEntry
	for _, k := range keys {
		for _, name := range []string{"\x00ttl", "a", "b"} {
			want = append(want, timerEntry{3, 7, k, name})
		}
	}
	require.Equal(t, want, dueAll(t, st, 3, 7))
	require.Equal(t, -1, store.CompareDue(-3, []byte("z"), "z", 5, []byte("a"), "a"))
	require.Equal(t, -1, store.CompareDue(5, []byte("k"), "a", 5, []byte("kk"), "a"))
	require.Equal(t, 1, store.CompareDue(5, []byte("k"), "b", 5, []byte("k"), "a"))
	require.Equal(t, 0, store.CompareDue(5, []byte("k"), "a", 5, []byte("k"), "a"))
	require.Len(t, dueAll(t, st, eventTime, 5), 5)
	require.Len(t, dueAll(t, st, eventTime, 4), 2)
	require.Len(t, dueAll(t, st, eventTime, math.MinInt64), 1)
	require.Empty(t, dueAll(t, st, wallClock, math.MaxInt64))

	n := 0
	require.NoError(t, st.Due(eventTime, math.MaxInt64, func([]byte, string, int64) (bool, error) {
		n++
		return n < 3, nil
	}))
	require.Equal(t, 3, n)
	boom := errors.New("boom")
	require.ErrorIs(t, st.Due(eventTime, 10, func([]byte, string, int64) (bool, error) { return true, boom }), boom)
}

// TestTimerStoreRefusesBadRecords: a write that is no timer or stream-time
// record fails, writing nothing of its batch.
func TestTimerStoreRefusesBadRecords(t *testing.T) {
	st := openTimers(t, t.TempDir())
	defer st.Close()
	good := store.Write{Key: store.TimerKey([]byte("k"), "t"), Value: store.TimerValue(eventTime, 1)}
	for name, w := range map[string]store.Write{
		"short value":       {Key: store.TimerKey([]byte("k"), "u"), Value: []byte{1, 2}},
		"bad key":           {Key: []byte{0x09, 'a'}, Value: store.TimerValue(eventTime, 1)},
		"short stream time": {Key: store.StreamTimeKey, Value: []byte{1}},
	} {
		err := st.Apply([]store.Write{good, w})
		require.Error(t, err, name)
		require.Empty(t, dueAll(t, st, eventTime, math.MaxInt64), name)
	}
	_, ok := st.StreamTime()
	require.False(t, ok)

	plain, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	require.NoError(t, err)
	defer plain.Close()
	require.Error(t, plain.Due(eventTime, 0, func([]byte, string, int64) (bool, error) { return true, nil }))
}

// TestTimersSettingIsRecorded: a store opened with the other Timers
// setting than it was created with is wiped; the same setting keeps it.
func TestTimersSettingIsRecorded(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, dir, store.Options{ApplicationID: "app"})
	require.NoError(t, err)
	require.NoError(t, st.ApplyThrough([]store.Write{{Key: []byte("k"), Value: []byte("v")}}, 1))
	require.NoError(t, st.Close())

	st, err = store.Open(ctx, dir, store.Options{ApplicationID: "app"})
	require.NoError(t, err)
	_, ok, err := st.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, ok, "kept by the same setting")
	require.NoError(t, st.Close())

	st = openTimers(t, dir)
	_, ok, err = st.Get([]byte("k"))
	require.NoError(t, err)
	require.False(t, ok, "wiped: not a timer store")
	require.NoError(t, st.ApplyThrough([]store.Write{
		{Key: store.TimerKey([]byte("k"), "t"), Value: store.TimerValue(eventTime, 1)},
		{Key: store.StreamTimeKey, Value: store.StreamTimeValue(42)},
	}, 1))
	require.NoError(t, st.Close())

	st = openTimers(t, dir)
	ms, ok := st.StreamTime()
	require.True(t, ok)
	require.Equal(t, int64(42), ms)
	require.Len(t, dueAll(t, st, eventTime, 1), 1)
	require.NoError(t, st.Close())

	st, err = store.Open(ctx, dir, store.Options{ApplicationID: "app"})
	require.NoError(t, err)
	defer st.Close()
	_, ok, err = st.Get(store.StreamTimeKey)
	require.NoError(t, err)
	require.False(t, ok, "wiped: a timer store opened as a plain one")
}

func TestScan(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	var ws []store.Write
	for _, k := range []string{"a", "b", "ba", "bb", "c", "d"} {
		ws = append(ws, store.Write{Key: []byte(k), Value: []byte("v" + k)})
	}
	require.NoError(t, st.Apply(ws))
	scan := func(lo, hi []byte, limit int) []string {
		var got []string
		require.NoError(t, st.Scan(lo, hi, func(k, v []byte) (bool, error) {
			require.Equal(t, "v"+string(k), string(v))
			got = append(got, string(k))
			return len(got) < limit, nil
		}))
		return got
	}
	for _, tc := range []struct {
		name   string
		lo, hi []byte
		limit  int
		want   []string
	}{
		{"all", nil, nil, 100, []string{"a", "b", "ba", "bb", "c", "d"}},
		{"half open", []byte("b"), []byte("c"), 100, []string{"b", "ba", "bb"}},
		{"inside", []byte("b0"), []byte("bz"), 100, []string{"ba", "bb"}},
		{"no upper bound", []byte("bb"), nil, 100, []string{"bb", "c", "d"}},
		{"empty", []byte("x"), nil, 100, nil},
		{"stop", nil, nil, 2, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, scan(tc.lo, tc.hi, tc.limit))
		})
	}
	boom := errors.New("boom")
	require.ErrorIs(t, st.Scan(nil, nil, func([]byte, []byte) (bool, error) { return false, boom }), boom)
}

// TestDueWhileApplying: walks running while batches set timers earlier
// than any before never leave a timer out of a later walk (the skip of
// the index's start must not pass over a timer a concurrent batch added).
func TestDueWhileApplying(t *testing.T) {
	st := openTimers(t, t.TempDir())
	defer st.Close()
	const n = 300
	done := make(chan struct{})
	walkers := make(chan error, 2)
	for range 2 {
		go func() {
			for {
				select {
				case <-done:
					walkers <- nil
					return
				default:
				}
				if err := st.Due(eventTime, math.MaxInt64, func([]byte, string, int64) (bool, error) { return false, nil }); err != nil {
					walkers <- err
					return
				}
			}
		}()
	}
	for i := range n {
		// Each batch cancels the previous timer and sets one due
		// earlier, so the floor must come down every time.
		ws := []store.Write{{Key: store.TimerKey(fmt.Appendf(nil, "k%d", i), "t"), Value: store.TimerValue(eventTime, int64(n-i))}}
		if i > 0 {
			ws = append(ws, store.Write{Key: store.TimerKey(fmt.Appendf(nil, "k%d", i-1), "t"), Delete: true})
		}
		require.NoError(t, st.ApplyThrough(ws, int64(i+1)))
		due, ok, err := st.NextDue(eventTime)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, int64(n-i), due)
	}
	close(done)
	require.NoError(t, <-walkers)
	require.NoError(t, <-walkers)
	require.Equal(t, []timerEntry{{eventTime, 1, fmt.Sprintf("k%d", n-1), "t"}}, dueAll(t, st, eventTime, math.MaxInt64))
}

// TestKeyTimers: KeyTimers lists a key's timers only, by name: not those
// of a key it prefixes or of a key of another length, nor the
// stream-time record.
func TestKeyTimers(t *testing.T) {
	st := openTimers(t, t.TempDir())
	defer st.Close()
	long := bytes.Repeat([]byte("a"), 200) // a two-byte length prefix
	require.NoError(t, st.ApplyThrough([]store.Write{
		{Key: store.TimerKey([]byte("a"), "u"), Value: store.TimerValue(wallClock, 7)},
		{Key: store.TimerKey([]byte("a"), "t"), Value: store.TimerValue(eventTime, 10)},
		{Key: store.TimerKey([]byte("ab"), "t"), Value: store.TimerValue(eventTime, 11)},
		{Key: store.TimerKey([]byte("b"), "t"), Value: store.TimerValue(eventTime, 12)},
		{Key: store.TimerKey(long, "t"), Value: store.TimerValue(eventTime, 13)},
		{Key: store.StreamTimeKey, Value: store.StreamTimeValue(99)},
	}, 6))
	list := func(key []byte) []string {
		var got []string
		require.NoError(t, st.KeyTimers(key, func(name string, kind uint8, due int64) (bool, error) {
			got = append(got, fmt.Sprintf("%s/%d@%d", name, kind, due))
			return true, nil
		}))
		return got
	}
	require.Equal(t, []string{fmt.Sprintf("t/%d@10", eventTime), fmt.Sprintf("u/%d@7", wallClock)}, list([]byte("a")))
	require.Equal(t, []string{fmt.Sprintf("t/%d@11", eventTime)}, list([]byte("ab")))
	require.Equal(t, []string{fmt.Sprintf("t/%d@13", eventTime)}, list(long))
	require.Empty(t, list([]byte("c")))
	require.Empty(t, list(long[:199]))
	require.Empty(t, list(nil), "an empty key, whose prefix would be StreamTimeKey")
	require.Empty(t, list([]byte{}))

	stop := errors.New("stop")
	require.ErrorIs(t, st.KeyTimers([]byte("a"), func(string, uint8, int64) (bool, error) { return false, stop }), stop)
}

// TestPrepareDropsWritesThatChangeNothing: Prepare drops a set of the
// value a key holds and a delete of an absent key, judging each write by
// what the stored value and the writes before it leave; the stream time
// passes. Random batches applied through ApplyPreparedThrough and
// ApplyPrepared leave the records and the due index of a model that
// applies every write, and a prepared batch applies once.
func TestPrepareDropsWritesThatChangeNothing(t *testing.T) {
	st := openTimers(t, t.TempDir())
	defer st.Close()
	a, b, c := store.TimerKey([]byte("a"), "t"), store.TimerKey([]byte("b"), "t"), store.TimerKey([]byte("c"), "t")
	require.NoError(t, st.Apply([]store.Write{{Key: a, Value: store.TimerValue(eventTime, 10)}, {Key: b, Value: store.TimerValue(eventTime, 20)}}))

	ws := []store.Write{
		{Key: a, Value: store.TimerValue(eventTime, 10)},              // the stored value: dropped
		{Key: b, Value: store.TimerValue(eventTime, 21)},              // moved: kept
		{Key: b, Value: store.TimerValue(eventTime, 21)},              // as the write before it left: dropped
		{Key: c, Delete: true},                                        // absent: dropped
		{Key: c, Value: store.TimerValue(wallClock, 5)},               // kept
		{Key: c, Delete: true},                                        // present after the write before: kept
		{Key: a, Value: store.TimerValue(wallClock, 10)},              // another kind: kept
		{Key: store.StreamTimeKey, Value: store.StreamTimeValue(100)}, // kept
	}
	p, err := st.Prepare(ws)
	require.NoError(t, err)
	require.Equal(t, []store.Write{ws[1], ws[4], ws[5], ws[6], ws[7]}, p.Writes())
	require.NoError(t, st.ApplyPreparedThrough(p, 7))
	require.ErrorContains(t, st.ApplyPreparedThrough(p, 8), "applied twice")
	next, ok := st.Next()
	require.True(t, ok)
	require.Equal(t, int64(7), next)
	requireIndexExact(t, st, map[string][]byte{
		string(a): store.TimerValue(wallClock, 10), string(b): store.TimerValue(eventTime, 21),
		string(store.StreamTimeKey): store.StreamTimeValue(100),
	})

	rng := rand.New(rand.NewPCG(7, 25))
	model := map[string][]byte{string(a): store.TimerValue(wallClock, 10), string(b): store.TimerValue(eventTime, 21),
		string(store.StreamTimeKey): store.StreamTimeValue(100)}
	for round := range 50 {
		var ws []store.Write
		for range 1 + rng.IntN(20) {
			k := store.TimerKey([]byte{'k', byte(rng.IntN(8))}, "t")
			w := store.Write{Key: k, Delete: rng.IntN(3) == 0}
			if !w.Delete {
				w.Value = store.TimerValue([]uint8{eventTime, wallClock}[rng.IntN(2)], int64(rng.IntN(4)))
			}
			ws = append(ws, w)
		}
		for _, w := range ws {
			if w.Delete {
				delete(model, string(w.Key))
			} else {
				model[string(w.Key)] = w.Value
			}
		}
		p, err := st.Prepare(ws)
		require.NoError(t, err)
		require.LessOrEqual(t, len(p.Writes()), len(ws))
		if round%2 == 0 {
			require.NoError(t, st.ApplyPrepared(p))
		} else {
			require.NoError(t, st.ApplyPreparedThrough(p, int64(100+round)))
		}
		requireIndexExact(t, st, model)
	}

	plain, err := store.Open(context.Background(), t.TempDir(), store.Options{ApplicationID: "app"})
	require.NoError(t, err)
	defer plain.Close()
	_, err = plain.Prepare(ws)
	require.ErrorContains(t, err, "not a timer store")
}
