package batch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// memView is a process.State and a Params.Due over maps: the committed
// state the batch starts from.
type memView struct {
	stores map[int]map[string]string
	timers []process.Timer
	stream int64
	now    time.Time
	stamps map[string]process.Stamp
}

// Stamp returns a copy of key's stamp: a call may change its timers in
// place (process.State.Stamp).
func (v *memView) Stamp(key []byte) (process.Stamp, bool, error) {
	s, ok := v.stamps[string(key)]
	s.Timers = slices.Clone(s.Timers)
	return s, ok, nil
}

func (v *memView) Get(store int, key []byte) ([]byte, bool, error) {
	val, ok := v.stores[store][string(key)]
	if !ok {
		return nil, false, nil
	}
	return []byte(val), true, nil
}

func (v *memView) Scan(store int, lo, hi []byte, fn func(k, v []byte) (bool, error)) error {
	var keys []string
	for k := range v.stores[store] {
		if k >= string(lo) && (hi == nil || k < string(hi)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if more, err := fn([]byte(k), []byte(v.stores[store][k])); !more || err != nil {
			return err
		}
	}
	return nil
}

func (v *memView) StreamTime() int64 { return v.stream }
func (v *memView) Now() time.Time    { return v.now }

func (v *memView) Due(kind process.TimeKind, upTo int64, fn func(process.Timer) (bool, error)) error {
	ts := slices.Clone(v.timers)
	slices.SortFunc(ts, func(a, b process.Timer) int {
		if a.Due != b.Due {
			return int(a.Due - b.Due)
		}
		if c := bytes.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, t := range ts {
		if t.Kind == kind && t.Due <= upTo {
			if more, err := fn(t); !more || err != nil {
				return err
			}
		}
	}
	return nil
}

func (v *memView) KeyTimers(key []byte, fn func(process.Timer) error) error {
	for _, t := range v.timers {
		if bytes.Equal(t.Key, key) {
			if err := fn(t); err != nil {
				return err
			}
		}
	}
	return nil
}

// scripted is a process.Stores whose record and timer calls are functions
// of the test; every call is logged as "key:what@streamTime".
type scripted struct {
	onRecord func(in process.Input, state []byte, st process.State) (process.Result, error)
	onFire   func(t process.Timer, state []byte, st process.State) (process.Result, error)
	mu       sync.Mutex
	log      []string
}

func (s *scripted) Validate() error { return nil }
func (s *scripted) Stateful() bool  { return true }
func (s *scripted) Prepare(r *kgo.Record) (process.Input, error) {
	return process.Input{Record: r, Key: r.Key}, nil
}

func (s *scripted) Process(context.Context, process.Input, []byte, bool) (process.Result, error) {
	return process.Result{}, errors.New("Process called on a Stores processor")
}
func (s *scripted) Stores() []process.StoreSpec { return []process.StoreSpec{{Name: "s"}} }
func (s *scripted) Timers() bool                { return true }

func (s *scripted) ProcessState(_ context.Context, in process.Input, state []byte, _ bool, st process.State) (process.Result, error) {
	s.add(fmt.Sprintf("%s:rec %s@%d", in.Key, in.Record.Value, st.StreamTime()))
	if s.onRecord == nil {
		return process.Result{}, nil
	}
	return s.onRecord(in, state, st)
}

func (s *scripted) Fire(_ context.Context, t process.Timer, state []byte, _ bool, st process.State) (process.Result, error) {
	s.add(fmt.Sprintf("%s:fire %s@%d", t.Key, t.Name, st.StreamTime()))
	if s.onFire == nil {
		return process.Result{}, nil
	}
	return s.onFire(t, state, st)
}

func (s *scripted) add(e string) {
	s.mu.Lock()
	s.log = append(s.log, e)
	s.mu.Unlock()
}

// byKey returns the log of key k, in call order.
func (s *scripted) byKey(k string) []string {
	var out []string
	for _, e := range s.log {
		if strings.HasPrefix(e, k+":") {
			out = append(out, e)
		}
	}
	return out
}

func trec(off int64, key, value string, ts int64) *kgo.Record {
	return &kgo.Record{Topic: "a", Partition: 2, Offset: off, Key: []byte(key), Value: []byte(value), Timestamp: time.UnixMilli(ts)}
}

func timer(key, name string, kind process.TimeKind, due int64) process.Timer {
	return process.Timer{Key: []byte(key), Name: name, Kind: kind, Due: due}
}

func storesParams(sp *scripted, v *memView) batch.Params {
	return batch.Params{
		Transformer: sp,
		Partition:   2,
		State: func(key []byte) ([]byte, bool, error) {
			b, ok, err := v.Get(process.DefaultStore, key)
			return b, ok, err
		},
		Sem:  make(chan struct{}, 4),
		Name: "task 2",
		View: v,
		Due:  v.Due,
	}
}

func TestRunTimersInterleaveByStreamTime(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	for _, tc := range []struct {
		name   string
		timers []process.Timer
		recs   []*kgo.Record
		want   map[string][]string
		order  []string // keys of the outputs' buckets, in order
		fired  int
		stream int64
	}{{
		name:   "event timer fires before the first record whose stream time reaches it",
		timers: []process.Timer{timer("a", "t", process.EventTime, 150)},
		recs:   []*kgo.Record{trec(0, "a", "1", 100), trec(1, "b", "2", 200), trec(2, "a", "3", 120)},
		want: map[string][]string{
			"a": {"a:rec 1@100", "a:fire t@200", "a:rec 3@200"},
			"b": {"b:rec 2@200"},
		},
		fired: 1, stream: 200,
	}, {
		name:   "event timer due by the batch's end fires after the key's last record",
		timers: []process.Timer{timer("a", "t", process.EventTime, 250)},
		recs:   []*kgo.Record{trec(0, "a", "1", 100), trec(1, "b", "2", 300)},
		want:   map[string][]string{"a": {"a:rec 1@100", "a:fire t@300"}},
		fired:  1, stream: 300,
	}, {
		name:   "a timer not due by the batch's end does not fire",
		timers: []process.Timer{timer("a", "t", process.EventTime, 301)},
		recs:   []*kgo.Record{trec(0, "a", "1", 300)},
		want:   map[string][]string{"a": {"a:rec 1@300"}},
		stream: 300,
	}, {
		name:   "wall-clock timer due by Now fires before the key's first record",
		timers: []process.Timer{timer("a", "w", process.WallClock, now.UnixMilli())},
		recs:   []*kgo.Record{trec(0, "b", "0", 10), trec(1, "a", "1", 20)},
		want:   map[string][]string{"a": {"a:fire w@10", "a:rec 1@20"}},
		fired:  1, stream: 20,
	}, {
		name: "due timers of one key fire in (Due, Name) order, across kinds",
		timers: []process.Timer{
			timer("a", "z", process.EventTime, 5), timer("a", "y", process.WallClock, 5),
			timer("a", "x", process.EventTime, 7), timer("a", "b", process.EventTime, 7),
		},
		recs:  []*kgo.Record{trec(0, "a", "1", 50)},
		want:  map[string][]string{"a": {"a:fire y@0", "a:rec 1@50", "a:fire z@50", "a:fire b@50", "a:fire x@50"}},
		fired: 4, stream: 50,
	}, {
		name:   "tick: no records, due timers of both kinds fire in keys ordered by first due",
		timers: []process.Timer{timer("k2", "e", process.EventTime, 40), timer("k1", "w", process.WallClock, 900_000), timer("k3", "late", process.EventTime, 41)},
		want:   map[string][]string{"k1": {"k1:fire w@40"}, "k2": {"k2:fire e@40"}, "k3": nil},
		order:  []string{"k2", "k1"},
		fired:  2, stream: 40,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &scripted{onFire: func(tm process.Timer, _ []byte, _ process.State) (process.Result, error) {
				return process.Result{Outputs: []*kgo.Record{{Topic: "out", Key: tm.Key}}}, nil
			}}
			v := &memView{timers: tc.timers, stream: 40, now: now}
			if tc.recs != nil {
				v.stream = 0
			}
			res, err := batch.Run(context.Background(), storesParams(sp, v), tc.recs)
			require.NoError(t, err)
			for k, want := range tc.want {
				require.Equal(t, want, sp.byKey(k), "calls of key %s", k)
			}
			require.Equal(t, tc.fired, res.Fired)
			require.Equal(t, tc.stream, res.StreamTime)
			require.Equal(t, len(tc.recs), res.Records)
			if tc.order != nil {
				var keys []string
				for _, o := range res.Outputs {
					keys = append(keys, string(o.Key))
				}
				require.Equal(t, tc.order, keys)
			}
			// Every fired timer is cancelled: none was set again.
			require.Len(t, res.Timers, tc.fired)
			for _, op := range res.Timers {
				require.True(t, op.Cancel, "timer %s/%s", op.Key, op.Name)
			}
		})
	}
}

func TestRunTimersSetInBatch(t *testing.T) {
	set := func(key, name string, due int64) process.TimerOp {
		return process.TimerOp{Timer: timer(key, name, process.EventTime, due)}
	}
	for _, tc := range []struct {
		name     string
		timers   []process.Timer
		recs     []*kgo.Record
		onRecord func(in process.Input) []process.TimerOp
		onFire   func(t process.Timer) []process.TimerOp
		wantLog  []string
		wantOps  []process.TimerOp
	}{{
		name: "a timer set in the past fires after the call that set it",
		recs: []*kgo.Record{trec(0, "a", "1", 100), trec(1, "a", "2", 110)},
		onRecord: func(in process.Input) []process.TimerOp {
			if string(in.Record.Value) == "1" {
				return []process.TimerOp{set("a", "t", 50)}
			}
			return nil
		},
		wantLog: []string{"a:rec 1@100", "a:fire t@100", "a:rec 2@110"},
		wantOps: []process.TimerOp{{Timer: timer("a", "t", process.EventTime, 50), Cancel: true}},
	}, {
		name:   "a record cancelling a due timer before it fires stops it",
		timers: []process.Timer{timer("a", "t", process.EventTime, 100)},
		recs:   []*kgo.Record{trec(0, "a", "1", 90), trec(1, "a", "2", 200)},
		onRecord: func(in process.Input) []process.TimerOp {
			if string(in.Record.Value) == "1" {
				return []process.TimerOp{{Timer: process.Timer{Key: []byte("a"), Name: "t"}, Cancel: true}}
			}
			return nil
		},
		wantLog: []string{"a:rec 1@90", "a:rec 2@200"},
		wantOps: []process.TimerOp{{Timer: process.Timer{Key: []byte("a"), Name: "t"}, Cancel: true}},
	}, {
		name:   "a record moving a due timer later delays it",
		timers: []process.Timer{timer("a", "t", process.EventTime, 100)},
		recs:   []*kgo.Record{trec(0, "a", "1", 90), trec(1, "b", "2", 150), trec(2, "a", "3", 160), trec(3, "b", "4", 300)},
		onRecord: func(in process.Input) []process.TimerOp {
			if string(in.Record.Value) == "1" {
				return []process.TimerOp{set("a", "t", 200)}
			}
			return nil
		},
		wantLog: []string{"a:rec 1@90", "a:rec 3@160", "a:fire t@300", "b:rec 2@150", "b:rec 4@300"},
		wantOps: []process.TimerOp{{Timer: timer("a", "t", process.EventTime, 200), Cancel: true}},
	}, {
		name:    "a callback re-setting its timer in the past fires once per batch; the re-set stays",
		timers:  []process.Timer{timer("a", "t", process.EventTime, 10)},
		recs:    []*kgo.Record{trec(0, "a", "1", 100)},
		onFire:  func(process.Timer) []process.TimerOp { return []process.TimerOp{set("a", "t", 20)} },
		wantLog: []string{"a:rec 1@100", "a:fire t@100"},
		wantOps: []process.TimerOp{set("a", "t", 20)},
	}, {
		name: "a timer set for another key does not fire in this batch",
		recs: []*kgo.Record{trec(0, "a", "1", 100), trec(1, "b", "2", 100)},
		onRecord: func(in process.Input) []process.TimerOp {
			if string(in.Key) == "a" {
				return []process.TimerOp{set("b", "t", 10)}
			}
			return nil
		},
		wantLog: []string{"a:rec 1@100", "b:rec 2@100"},
		wantOps: []process.TimerOp{set("b", "t", 10)},
	}, {
		name: "timer operations dedupe per key and name, last in bucket order wins",
		recs: []*kgo.Record{trec(0, "a", "1", 1), trec(1, "b", "2", 1), trec(2, "a", "3", 1)},
		onRecord: func(in process.Input) []process.TimerOp {
			// a then b set c's timer: b's bucket is later, so b's wins
			// although a's second record ran last.
			return []process.TimerOp{set("c", "t", int64(100+in.Record.Offset)), set("c", "u", 5)}
		},
		wantLog: []string{"a:rec 1@1", "a:rec 3@1", "b:rec 2@1"},
		wantOps: []process.TimerOp{set("c", "t", 101), set("c", "u", 5)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &scripted{
				onRecord: func(in process.Input, _ []byte, _ process.State) (process.Result, error) {
					if tc.onRecord == nil {
						return process.Result{}, nil
					}
					return process.Result{Timers: tc.onRecord(in)}, nil
				},
				onFire: func(tm process.Timer, _ []byte, _ process.State) (process.Result, error) {
					if tc.onFire == nil {
						return process.Result{}, nil
					}
					return process.Result{Timers: tc.onFire(tm)}, nil
				},
			}
			v := &memView{timers: tc.timers}
			p := storesParams(sp, v)
			res, err := batch.Run(context.Background(), p, tc.recs)
			require.NoError(t, err)
			var got []string
			for _, k := range []string{"a", "b"} {
				got = append(got, sp.byKey(k)...)
			}
			require.Equal(t, tc.wantLog, got)
			require.Equal(t, tc.wantOps, res.Timers)
		})
	}
}

func TestRunStoresReadsAndWrites(t *testing.T) {
	put := func(key, v string) process.StoreWrite {
		return process.StoreWrite{Store: 0, Key: []byte(key), Value: []byte(v)} // named store 0: State's store 1
	}
	v := &memView{stores: map[int]map[string]string{
		process.DefaultStore: {"a": "A0", "b": "B0", "c": "C0"},
		1:                    {"x": "x0", "y": "y0"},
	}}
	var (
		mu    sync.Mutex
		reads = map[string]string{}
	)
	scan := func(st process.State, store int) string {
		var parts []string
		require.NoError(t, st.Scan(store, nil, nil, func(k, v []byte) (bool, error) {
			parts = append(parts, string(k)+"="+string(v))
			return true, nil
		}))
		return strings.Join(parts, ",")
	}
	sp := &scripted{onRecord: func(in process.Input, state []byte, st process.State) (process.Result, error) {
		id := string(in.Key) + string(in.Record.Value)
		x, _, _ := st.Get(1, []byte("x"))
		b, _, _ := st.Get(process.DefaultStore, []byte("b"))
		mu.Lock()
		reads[id] = fmt.Sprintf("x=%s b=%s s1=[%s] s0=[%s]", x, b, scan(st, 1), scan(st, process.DefaultStore))
		mu.Unlock()
		switch id {
		case "a1":
			return process.Result{Op: process.Put, State: []byte("A1"),
				Writes: []process.StoreWrite{put("x", "xa"), put("w", "wa"), {Store: 0, Key: []byte("y"), Delete: true}}}, nil
		case "b2":
			return process.Result{Op: process.Delete, Writes: []process.StoreWrite{put("x", "xb")}}, nil
		}
		return process.Result{}, nil
	}}
	res, err := batch.Run(context.Background(), storesParams(sp, v),
		[]*kgo.Record{trec(0, "a", "1", 1), trec(1, "b", "2", 1), trec(2, "a", "3", 1)})
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		// Committed state only.
		"a1": "x=x0 b=B0 s1=[x=x0,y=y0] s0=[a=A0,b=B0,c=C0]",
		// a's writes are invisible to b: it is another bucket.
		"b2": "x=x0 b=B0 s1=[x=x0,y=y0] s0=[a=A0,b=B0,c=C0]",
		// a's own writes over the committed state; b's invisible.
		"a3": "x=xa b=B0 s1=[w=wa,x=xa] s0=[a=A1,b=B0,c=C0]",
	}, reads)
	// Last write per store and key in bucket order: b's bucket is after a's.
	require.Equal(t, []process.StoreWrite{put("w", "wa"), {Store: 0, Key: []byte("y"), Delete: true}, put("x", "xb")}, res.StoreWrites)
}

func TestRunTimerOutputsAndErrors(t *testing.T) {
	now := time.UnixMilli(5000)
	for _, tc := range []struct {
		name  string
		timer process.Timer
		stamp time.Time
	}{
		{"event-time output without a timestamp gets Due", timer("a", "e", process.EventTime, 30), time.UnixMilli(30)},
		{"wall-clock output without a timestamp gets Now", timer("a", "w", process.WallClock, 4000), now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := time.UnixMilli(7)
			sp := &scripted{onFire: func(process.Timer, []byte, process.State) (process.Result, error) {
				return process.Result{Outputs: []*kgo.Record{{Topic: "out"}, {Topic: "out", Timestamp: set}}}, nil
			}}
			res, err := batch.Run(context.Background(), storesParams(sp, &memView{timers: []process.Timer{tc.timer}, stream: 100, now: now}), nil)
			require.NoError(t, err)
			require.Len(t, res.Outputs, 2)
			require.True(t, res.Outputs[0].Timestamp.Equal(tc.stamp), "got %v", res.Outputs[0].Timestamp)
			require.True(t, res.Outputs[1].Timestamp.Equal(set))
		})
	}
	t.Run("a failing callback is a TimerError and nothing commits", func(t *testing.T) {
		boom := errors.New("boom")
		sp := &scripted{onFire: func(process.Timer, []byte, process.State) (process.Result, error) { return process.Result{}, boom }}
		_, err := batch.Run(context.Background(), storesParams(sp, &memView{timers: []process.Timer{timer("k", "t", process.EventTime, 1)}, stream: 1}), nil)
		var te *transformer.TimerError
		require.ErrorAs(t, err, &te)
		require.Equal(t, "t", te.Name)
		require.Equal(t, []byte("k"), te.Key)
		require.ErrorIs(t, err, boom)
	})
	t.Run("a panicking callback is a TimerError", func(t *testing.T) {
		sp := &scripted{onFire: func(process.Timer, []byte, process.State) (process.Result, error) { panic("kaboom") }}
		_, err := batch.Run(context.Background(), storesParams(sp, &memView{timers: []process.Timer{timer("k", "t", process.EventTime, 1)}, stream: 1}), nil)
		var te *transformer.TimerError
		require.ErrorAs(t, err, &te)
		require.ErrorContains(t, err, "kaboom")
	})
	t.Run("a fired timer's state write and delete apply to its key", func(t *testing.T) {
		sp := &scripted{onFire: func(tm process.Timer, state []byte, _ process.State) (process.Result, error) {
			if tm.Name == "del" {
				return process.Result{Op: process.Delete}, nil
			}
			return process.Result{Op: process.Put, State: append(state, '!')}, nil
		}}
		v := &memView{stores: map[int]map[string]string{process.DefaultStore: {"a": "A", "b": "B"}},
			timers: []process.Timer{timer("a", "put", process.EventTime, 1), timer("b", "del", process.EventTime, 1), timer("c", "del", process.EventTime, 1)}, stream: 1}
		res, err := batch.Run(context.Background(), storesParams(sp, v), nil)
		require.NoError(t, err)
		// c had no state: deleting it writes no tombstone.
		require.Len(t, res.Writes, 2)
		require.Equal(t, "a", string(res.Writes[0].Key))
		require.Equal(t, "A!", string(res.Writes[0].Value))
		require.Equal(t, "b", string(res.Writes[1].Key))
		require.True(t, res.Writes[1].Delete)
	})
	t.Run("a Stores processor without View is refused", func(t *testing.T) {
		p := storesParams(&scripted{}, &memView{})
		p.View = nil
		_, err := batch.Run(context.Background(), p, []*kgo.Record{trec(0, "a", "1", 1)})
		require.ErrorContains(t, err, "Params.View")
	})
}

// TestRunTimersBacklogStopsAtBound: with more due timers of keys without
// records than MaxTimers, the walk of the due timers stops at the bound
// when the keys with records can be read per key (KeyTimers): a record
// key's timer due after the backlog still fires, interleaved before its
// record, as when the walk reads on through the whole backlog.
func TestRunTimersBacklogStopsAtBound(t *testing.T) {
	var timers []process.Timer
	for i := range 20 {
		timers = append(timers, timer(fmt.Sprintf("k%02d", i), "t", process.EventTime, int64(1+i)))
	}
	timers = append(timers, timer("r", "t", process.EventTime, 24), timer("r", "later", process.EventTime, 26))
	for _, perKey := range []bool{true, false} {
		t.Run(fmt.Sprintf("KeyTimers=%v", perKey), func(t *testing.T) {
			sp := &scripted{}
			v := &memView{timers: timers, stream: 25, now: time.UnixMilli(0)}
			p := storesParams(sp, v)
			p.MaxTimers = 3
			visited := 0
			p.Due = func(kind process.TimeKind, upTo int64, fn func(process.Timer) (bool, error)) error {
				return v.Due(kind, upTo, func(tm process.Timer) (bool, error) {
					visited++
					return fn(tm)
				})
			}
			if perKey {
				p.KeyTimers = v.KeyTimers
			}
			res, err := batch.Run(context.Background(), p, []*kgo.Record{trec(0, "r", "x", 30)})
			require.NoError(t, err)
			require.Equal(t, []string{"r:fire t@25", "r:rec x@30", "r:fire later@30"}, sp.byKey("r"))
			for i := range 20 {
				k := fmt.Sprintf("k%02d", i)
				if i < 3 {
					require.Equal(t, []string{k + ":fire t@30"}, sp.byKey(k))
				} else {
					require.Empty(t, sp.byKey(k), "beyond the bound")
				}
			}
			require.Equal(t, 5, res.Fired)
			require.True(t, res.MoreDue)
			if perKey {
				require.Equal(t, 4, visited, "the bound, and the entry that stopped the walk")
			} else {
				require.Equal(t, len(timers), visited, "the whole backlog")
			}
		})
	}
}

// TestRunRefusesBadTimerOps: a timer operation of a record's call or a
// timer's callback with a clock other than EventTime and WallClock, an
// empty state key or an empty name fails the batch with
// INVALID_TRANSFORMER; nothing of it reaches the Result.
func TestRunRefusesBadTimerOps(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   process.TimerOp
		want string
	}{
		{"clock 0", process.TimerOp{Timer: process.Timer{Key: []byte("a"), Name: "t", Due: 5}}, "clock 0"},
		{"clock 3", process.TimerOp{Timer: process.Timer{Key: []byte("a"), Name: "t", Kind: 3, Due: 5}}, "clock 3"},
		{"empty key", process.TimerOp{Timer: process.Timer{Name: "t", Kind: process.EventTime, Due: 5}}, "non-empty state key"},
		{"empty name", process.TimerOp{Timer: process.Timer{Key: []byte("a"), Kind: process.EventTime, Due: 5}}, "non-empty state key and name"},
	} {
		t.Run("record/"+tc.name, func(t *testing.T) {
			sp := &scripted{onRecord: func(process.Input, []byte, process.State) (process.Result, error) {
				return process.Result{Timers: []process.TimerOp{tc.op}}, nil
			}}
			_, err := batch.Run(context.Background(), storesParams(sp, &memView{}), []*kgo.Record{trec(0, "a", "1", 1)})
			var ce *flechtwerk.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, flechtwerk.CodeInvalidTransformer, ce.Code)
			require.ErrorContains(t, err, tc.want)
		})
		t.Run("timer/"+tc.name, func(t *testing.T) {
			sp := &scripted{onFire: func(process.Timer, []byte, process.State) (process.Result, error) {
				return process.Result{Timers: []process.TimerOp{tc.op}}, nil
			}}
			_, err := batch.Run(context.Background(), storesParams(sp, &memView{timers: []process.Timer{timer("k", "t", process.EventTime, 1)}, stream: 1}), nil)
			var te *transformer.TimerError
			require.ErrorAs(t, err, &te)
			var ce *flechtwerk.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, flechtwerk.CodeInvalidTransformer, ce.Code)
			require.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("a cancel needs no clock", func(t *testing.T) {
		sp := &scripted{onRecord: func(process.Input, []byte, process.State) (process.Result, error) {
			return process.Result{Timers: []process.TimerOp{{Timer: process.Timer{Key: []byte("a"), Name: "t"}, Cancel: true}}}, nil
		}}
		res, err := batch.Run(context.Background(), storesParams(sp, &memView{}), []*kgo.Record{trec(0, "a", "1", 1)})
		require.NoError(t, err)
		require.Len(t, res.Timers, 1)
	})
}

// TestRunKeepsLastOperationPerTimer checks Result.Timers against a model:
// records of a few keys set and cancel timers of their own key and of
// others, more names than a bucket replaces in place; the result holds,
// per key and name, the operation of the last call in bucket order (the
// order of the keys' first records), and nothing else.
func TestRunKeepsLastOperationPerTimer(t *testing.T) {
	for seed := range int64(200) {
		r := rand.New(rand.NewSource(seed))
		keys := []string{"a", "b", "c"}[:1+r.Intn(3)]
		foreign := r.Intn(2) == 0
		type op struct {
			key, name string
			cancel    bool
			due       int64
		}
		script := map[int64][]op{}
		var recs []*kgo.Record
		for i := range int64(1 + r.Intn(30)) {
			k := keys[r.Intn(len(keys))]
			recs = append(recs, trec(i, k, fmt.Sprint(i), 1))
			for range r.Intn(4) {
				o := op{key: k, name: fmt.Sprintf("t%d", r.Intn(12)), cancel: r.Intn(4) == 0, due: 1000 + r.Int63n(1000)}
				if foreign && r.Intn(3) == 0 {
					o.key = keys[r.Intn(len(keys))]
				}
				script[i] = append(script[i], o)
			}
		}
		// The model: buckets run in the order of their keys' first
		// records; a bucket's calls in record order.
		var order []string
		for _, rec := range recs {
			if !slices.Contains(order, string(rec.Key)) {
				order = append(order, string(rec.Key))
			}
		}
		want := map[string]op{}
		for _, k := range order {
			for _, rec := range recs {
				if string(rec.Key) != k {
					continue
				}
				for _, o := range script[rec.Offset] {
					want[o.key+"/"+o.name] = o
				}
			}
		}
		sp := &scripted{onRecord: func(in process.Input, _ []byte, _ process.State) (process.Result, error) {
			var res process.Result
			for _, o := range script[in.Record.Offset] {
				res.Timers = append(res.Timers, process.TimerOp{Timer: timer(o.key, o.name, process.EventTime, o.due), Cancel: o.cancel})
			}
			return res, nil
		}}
		res, err := batch.Run(context.Background(), storesParams(sp, &memView{}), recs)
		require.NoError(t, err)
		got := map[string]op{}
		for _, o := range res.Timers {
			k := string(o.Key) + "/" + o.Name
			require.NotContains(t, got, k, "seed %d: two operations on timer %s", seed, k)
			got[k] = op{key: string(o.Key), name: o.Name, cancel: o.Cancel, due: o.Due}
			if o.Cancel {
				got[k] = op{key: string(o.Key), name: o.Name, cancel: true, due: want[k].due}
			}
		}
		require.Equal(t, want, got, "seed %d", seed)
	}
}

// badPrepare is scripted whose records of value "bad" do not decode.
type badPrepare struct{ *scripted }

func (b badPrepare) Prepare(r *kgo.Record) (process.Input, error) {
	if string(r.Value) == "bad" {
		return process.Input{Record: r, Key: r.Key}, fmt.Errorf("value does not decode: %w", transformer.ErrInvalidRecord)
	}
	return b.scripted.Prepare(r)
}

// TestRunDroppedRecordKeepsStreamTime: a record the policy drops because
// it does not decode (skipped or dead-lettered) does not move the stream
// time, so a poison record with a timestamp far ahead fires no event-time
// timer; a substituted one runs, and its timestamp counts.
func TestRunDroppedRecordKeepsStreamTime(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pol    *batch.Policy
		stream int64
		fired  int
	}{
		{"skip", &batch.Policy{Mode: batch.Skip}, 100, 0},
		{"dead letter", &batch.Policy{Mode: batch.DeadLetter, DeadLetterTopic: "dlq"}, 100, 0},
		{"substitute", &batch.Policy{Mode: batch.Substitute, Substitute: func(*transformer.InvalidRecordError) ([]byte, error) { return []byte("sub"), nil }}, 4_000_000_000_000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &scripted{}
			v := &memView{stream: 50, timers: []process.Timer{timer("a", "t", process.EventTime, 500)}, now: time.UnixMilli(1)}
			p := storesParams(sp, v)
			p.Transformer = badPrepare{sp}
			p.Policy = tc.pol
			res, err := batch.Run(context.Background(), p, []*kgo.Record{
				trec(0, "x", "bad", 4_000_000_000_000),
				trec(1, "a", "1", 100),
			})
			require.NoError(t, err)
			require.Equal(t, tc.stream, res.StreamTime)
			require.Equal(t, tc.fired, res.Fired)
			if tc.fired == 0 {
				require.Equal(t, []string{"a:rec 1@100"}, sp.byKey("a"))
			}
		})
	}
}
