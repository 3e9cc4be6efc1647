package task

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// testTask is a task without producer: a default store, one named store
// and a timer store, for the reads of its batches.
func testTask(t *testing.T) *Task {
	t.Helper()
	dir := t.TempDir()
	open := func(name string, timers bool) *store.Store {
		st, err := store.Open(context.Background(), filepath.Join(dir, name), store.Options{Timers: timers})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	tk := &Task{
		stores: []*store.Store{open("default", false), open("named", false)},
		topics: []string{"app-changelog", "app-named-changelog"},
		names:  []string{"", "named"},
		timers: open("timers", true),
	}
	tk.open = newOpen(2)
	return tk
}

func put(k, v string) store.Write { return store.Write{Key: []byte(k), Value: []byte(v)} }
func del(k string) store.Write    { return store.Write{Key: []byte(k), Delete: true} }

func TestViewScanMergesOverlay(t *testing.T) {
	tk := testTask(t)
	require.NoError(t, tk.stores[1].Apply([]store.Write{put("a", "1"), put("c", "3"), put("e", "5"), put("g", "7")}))
	for _, w := range []store.Write{put("b", "2o"), del("c"), put("e", "5o"), put("h", "8o"), del("x")} {
		tk.open.stores[1].put(w)
	}
	v := &view{t: tk}
	tests := []struct {
		name   string
		lo, hi string
		limit  int
		want   []string
	}{
		{"all", "", "", 0, []string{"a=1", "b=2o", "e=5o", "g=7", "h=8o"}},
		{"range", "b", "g", 0, []string{"b=2o", "e=5o"}},
		{"from an overlay delete", "c", "", 0, []string{"e=5o", "g=7", "h=8o"}},
		{"stopped early", "", "", 2, []string{"a=1", "b=2o"}},
		{"empty", "x", "z", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			var hi []byte
			if tt.hi != "" {
				hi = []byte(tt.hi)
			}
			err := v.Scan(1, []byte(tt.lo), hi, func(k, val []byte) (bool, error) {
				got = append(got, string(k)+"="+string(val))
				return tt.limit == 0 || len(got) < tt.limit, nil
			})
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	val, found, err := v.Get(1, []byte("c"))
	require.NoError(t, err)
	require.False(t, found, "deleted in the open transaction: %q", val)
	val, found, err = v.Get(1, []byte("g"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "7", string(val))
	_, _, err = v.Get(2, []byte("g"))
	require.Error(t, err, "no store 2")
}

func TestDueMergesOverlay(t *testing.T) {
	tk := testTask(t)
	timer := func(key, name string, due int64) store.Write {
		return store.Write{Key: store.TimerKey([]byte(key), name), Value: store.TimerValue(uint8(process.EventTime), due)}
	}
	require.NoError(t, tk.timers.Apply([]store.Write{
		timer("a", "t", 10), timer("b", "t", 20), timer("c", "t", 30), timer("d", "t", 40), timer("aa", "t", 15),
		{Key: store.TimerKey([]byte("w"), "t"), Value: store.TimerValue(uint8(process.WallClock), 5)},
	}))
	set := func(key, name string, kind process.TimeKind, due int64) process.TimerOp {
		return process.TimerOp{Timer: process.Timer{Key: []byte(key), Name: name, Kind: kind, Due: due}}
	}
	tk.open.timers.put(set("e", "t", process.EventTime, 15))                                             // new, between
	tk.open.timers.put(set("c", "t", process.EventTime, 50))                                             // moved later
	tk.open.timers.put(process.TimerOp{Timer: process.Timer{Key: []byte("b"), Name: "t"}, Cancel: true}) // cancelled
	tk.open.timers.put(set("a", "u", process.EventTime, 10))                                             // same due as a/t
	tk.open.timers.put(set("v", "t", process.WallClock, 1))                                              // other kind
	collect := func(kind process.TimeKind, upTo int64, limit int) []string {
		var got []string
		require.NoError(t, tk.due(kind, upTo, func(tm process.Timer) (bool, error) {
			got = append(got, fmt.Sprintf("%s/%s@%d", tm.Key, tm.Name, tm.Due))
			return limit == 0 || len(got) < limit, nil
		}))
		return got
	}
	// By due time, then state key bytes ("aa" before "e"), then name.
	require.Equal(t, []string{"a/t@10", "a/u@10", "aa/t@15", "e/t@15", "d/t@40", "c/t@50"}, collect(process.EventTime, 100, 0))
	require.Equal(t, []string{"a/t@10", "a/u@10", "aa/t@15", "e/t@15"}, collect(process.EventTime, 39, 0))
	require.Equal(t, []string{"a/t@10", "a/u@10"}, collect(process.EventTime, 100, 2))
	require.Equal(t, []string{"v/t@1", "w/t@5"}, collect(process.WallClock, 100, 0))

	next, ok, err := tk.NextWallDue()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, time.UnixMilli(1), next)
	// The earliest committed wall timer replaced in the open transaction
	// does not count.
	tk.open.timers.put(process.TimerOp{Timer: process.Timer{Key: []byte("v"), Name: "t"}, Cancel: true})
	tk.open.timers.put(set("w", "t", process.WallClock, 7))
	next, ok, err = tk.NextWallDue()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, time.UnixMilli(7), next)
}

// TestViewScanInPasses: a Scan longer than a pass (scanChunk) sees every
// key once, in order, the overlay winning, a read inside fn works, and
// fn runs outside the read: the task's reads can close (Close) while fn
// is blocked.
func TestViewScanInPasses(t *testing.T) {
	tk := testTask(t)
	var ws []store.Write
	want := map[string]string{}
	for i := range 1000 {
		k := fmt.Sprintf("k%04d", i)
		ws = append(ws, put(k, "s"))
		want[k] = "s"
	}
	require.NoError(t, tk.stores[1].Apply(ws))
	for i := 0; i < 1000; i += 7 {
		k := fmt.Sprintf("k%04d", i)
		tk.open.stores[1].put(del(k))
		delete(want, k)
	}
	for i := 3; i < 1000; i += 11 {
		k := fmt.Sprintf("k%04d", i)
		tk.open.stores[1].put(put(k, "o"))
		want[k] = "o"
	}
	tk.open.stores[1].put(put("k9999", "o"))
	want["k9999"] = "o"
	v := &view{t: tk}
	got := map[string]string{}
	var last string
	require.NoError(t, v.Scan(1, nil, nil, func(k, val []byte) (bool, error) {
		require.Greater(t, string(k), last, "in order, once")
		last = string(k)
		got[string(k)] = string(val)
		again, found, err := v.Get(1, k)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, string(val), string(again))
		return true, nil
	}))
	require.Equal(t, want, got)

	blocked, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		done <- v.Scan(1, nil, nil, func([]byte, []byte) (bool, error) {
			if first {
				first = false
				close(blocked)
				<-release
			}
			return true, nil
		})
	}()
	<-blocked
	closed := make(chan struct{})
	go func() { tk.closeReads(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("closing the reads waited for user code in a Scan")
	}
	close(release)
	require.ErrorIs(t, <-done, ErrClosed, "the next pass finds the task closed")
}

// TestKeyTimersMergesOverlay: a key's timers are the committed ones
// under the open transaction's: a replaced one at its new due, a
// cancelled one gone, a new one added, other keys' left out.
func TestKeyTimersMergesOverlay(t *testing.T) {
	tk := testTask(t)
	timer := func(key, name string, due int64) store.Write {
		return store.Write{Key: store.TimerKey([]byte(key), name), Value: store.TimerValue(uint8(process.EventTime), due)}
	}
	require.NoError(t, tk.timers.Apply([]store.Write{timer("a", "t", 10), timer("a", "u", 20), timer("a", "v", 30), timer("b", "t", 5)}))
	set := func(key, name string, kind process.TimeKind, due int64) process.TimerOp {
		return process.TimerOp{Timer: process.Timer{Key: []byte(key), Name: name, Kind: kind, Due: due}}
	}
	tk.open.timers.put(set("a", "t", process.EventTime, 50))                                             // moved
	tk.open.timers.put(process.TimerOp{Timer: process.Timer{Key: []byte("a"), Name: "u"}, Cancel: true}) // cancelled
	tk.open.timers.put(set("a", "w", process.WallClock, 7))                                              // new
	tk.open.timers.put(set("b", "u", process.EventTime, 1))                                              // another key
	list := tk.keyTimers()
	collect := func(key string) []string {
		var got []string
		require.NoError(t, list([]byte(key), func(tm process.Timer) error {
			require.Equal(t, key, string(tm.Key))
			got = append(got, fmt.Sprintf("%s/%d@%d", tm.Name, tm.Kind, tm.Due))
			return nil
		}))
		slices.Sort(got)
		return got
	}
	require.Equal(t, []string{
		fmt.Sprintf("t/%d@50", process.EventTime), fmt.Sprintf("v/%d@30", process.EventTime), fmt.Sprintf("w/%d@7", process.WallClock),
	}, collect("a"))
	require.Equal(t, []string{fmt.Sprintf("t/%d@5", process.EventTime), fmt.Sprintf("u/%d@1", process.EventTime)}, collect("b"))
	require.Empty(t, collect("c"))
}
