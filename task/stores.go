package task

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// overlay is the open transaction's last write per key of one store.
// Reads see it before the store. The buckets of a batch read it
// concurrently; only Add (between batches) writes it.
type overlay struct {
	m map[string]store.Write
	// hint sizes m when the first write makes it (the previous
	// transaction's count): growing a map of thousands of keys from
	// empty, commit after commit, costs its rehashes each time.
	hint int

	mu     sync.Mutex
	sorted []string // keys of m in byte order; nil: not built since the last write
	// stamped: a write of m carried a stamp (Task.last keeps m then).
	stamped bool
}

func (o *overlay) put(w store.Write) (delta int64) {
	if o.m == nil {
		o.m = make(map[string]store.Write, o.hint)
	}
	if old, ok := o.m[string(w.Key)]; ok {
		delta -= int64(len(old.Key) + len(old.Value))
	} else {
		o.sorted = nil
	}
	o.m[string(w.Key)] = w
	o.stamped = o.stamped || w.Stamp != nil
	return delta + int64(len(w.Key)+len(w.Value))
}

func (o *overlay) get(key []byte) (value []byte, found, ok bool) {
	w, ok := o.m[string(key)]
	if !ok {
		return nil, false, false
	}
	if w.Delete {
		return nil, false, true
	}
	return bytes.Clone(w.Value), true, true
}

// keys returns the overlay's keys in byte order, built once per write.
func (o *overlay) keys() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sorted == nil && len(o.m) > 0 {
		ks := make([]string, 0, len(o.m))
		for k := range o.m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		o.sorted = ks
	}
	return o.sorted
}

func (o *overlay) writes() []store.Write {
	ws := make([]store.Write, 0, len(o.m))
	for _, w := range o.m {
		ws = append(ws, w)
	}
	return ws
}

// timerOverlay is the open transaction's last operation per timer (by
// store.TimerKey). Due merges it with the timer store in the store's
// order: due time, state key, name (store.CompareDue).
type timerOverlay struct {
	m    map[string]process.TimerOp
	hint int // sizes m when made, as overlay.hint
	// low is, per kind, at most the earliest due time of the timers set
	// in m (exact after a scan, lowered by every set): a batch whose
	// horizon is before it finds no due timer in m without a scan.
	low [3]int64
	// has: m may hold set timers of the kind.
	has [3]bool

	mu sync.Mutex // serializes the scans of concurrent readers
}

type timerAt struct {
	tk  string // store.TimerKey
	due int64
	op  process.TimerOp
}

// cmpTimerAt orders timers as the timer store's Due lists them
// (store.CompareDue: due time, state key, name).
func cmpTimerAt(a, b timerAt) int {
	return store.CompareDue(a.due, a.op.Key, a.op.Name, b.due, b.op.Key, b.op.Name)
}

// put records op (a hint combined with the operation before it); only
// Add calls it, while no batch reads.
func (o *timerOverlay) put(op process.TimerOp) {
	if o.m == nil {
		o.m = make(map[string]process.TimerOp, o.hint)
	}
	tk := string(store.TimerKey(op.Key, op.Name))
	if op.Hint {
		if prev, ok := o.m[tk]; ok {
			op = batch.CombineHint(prev, op)
		}
	}
	o.m[tk] = op
	if k := op.Kind; !op.Cancel && int(k) < len(o.low) && (!o.has[k] || op.Due < o.low[k]) {
		o.low[k], o.has[k] = op.Due, true
	}
}

// dueUpTo returns the timers of kind set in the overlay that are due at
// or before upTo, in due order. It costs nothing while upTo is before
// the earliest of them, else a pass over the overlay.
func (o *timerOverlay) dueUpTo(kind process.TimeKind, upTo int64) []timerAt {
	if int(kind) >= len(o.low) {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.has[kind] || o.low[kind] > upTo {
		return nil
	}
	var due []timerAt
	low, has := int64(math.MaxInt64), false
	for tk, op := range o.m {
		if op.Cancel || op.Kind != kind {
			continue
		}
		low, has = min(low, op.Due), true
		if op.Due <= upTo {
			due = append(due, timerAt{tk: tk, due: op.Due, op: op})
		}
	}
	o.low[kind], o.has[kind] = low, has
	slices.SortFunc(due, cmpTimerAt)
	return due
}

func (o *timerOverlay) writes() []store.Write {
	ws := make([]store.Write, 0, len(o.m))
	for tk, op := range o.m {
		w := store.Write{Key: []byte(tk), Delete: op.Cancel, Hint: op.Hint}
		if !op.Cancel {
			w.Value = store.TimerValue(uint8(op.Kind), op.Due)
		}
		ws = append(ws, w)
	}
	return ws
}

// storeAt returns store i (process.DefaultStore or a named store's index
// + 1) and its overlay, or an error for an index out of range.
func (t *Task) storeAt(i int) (*store.Store, *overlay, error) {
	if i < 0 || i >= len(t.stores) {
		return nil, nil, fmt.Errorf("task %d: no store %d (the processor has %d named stores)", t.cfg.Partition, i, len(t.stores)-1)
	}
	return t.stores[i], &t.open.stores[i], nil
}

// view is the process.State of one batch: committed state plus the open
// transaction as of the batch's start.
type view struct {
	t      *Task
	stream int64
	now    time.Time
}

func (v *view) StreamTime() int64 { return v.stream }
func (v *view) Now() time.Time    { return v.now }

// Stamp reads the stamp of key's default state: of the open
// transaction's last write of it, else of the store.
func (v *view) Stamp(key []byte) (process.Stamp, bool, error) {
	t := v.t
	if !t.enter() {
		return process.Stamp{}, false, ErrClosed
	}
	defer t.leave()
	if w, ok := t.open.stores[process.DefaultStore].m[string(key)]; ok {
		if w.Delete {
			return process.Stamp{}, false, nil
		}
		s, ok := stamp.Decode(w.Stamp)
		return s, ok, nil
	}
	st := t.stores[process.DefaultStore]
	if st == nil {
		return process.Stamp{}, false, nil
	}
	b, ok, err := st.StampOf(key)
	if err != nil || !ok {
		return process.Stamp{}, false, err
	}
	s, ok := stamp.Decode(b)
	return s, ok, nil
}

func (v *view) Get(i int, key []byte) ([]byte, bool, error) {
	t := v.t
	if !t.enter() {
		return nil, false, ErrClosed
	}
	defer t.leave()
	st, ov, err := t.storeAt(i)
	if err != nil {
		return nil, false, err
	}
	if val, found, ok := ov.get(key); ok {
		return val, found, nil
	}
	if st == nil {
		return nil, false, nil
	}
	return st.Get(key)
}

// scanChunk is how many entries a Scan reads per pass: fn (user code) is
// called between passes, outside the read, so that Close never waits for
// user code.
const scanChunk = 256

func (v *view) Scan(i int, lo, hi []byte, fn func(key, value []byte) (bool, error)) error {
	t := v.t
	for {
		var kvs [][2][]byte
		if !t.enter() {
			return ErrClosed
		}
		st, ov, err := t.storeAt(i)
		if err == nil {
			err = scanMerged(st, ov, lo, hi, func(k, val []byte) (bool, error) {
				kvs = append(kvs, [2][]byte{bytes.Clone(k), bytes.Clone(val)})
				return len(kvs) < scanChunk, nil
			})
		}
		t.leave()
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			if more, err := fn(kv[0], kv[1]); err != nil || !more {
				return err
			}
		}
		if len(kvs) < scanChunk {
			return nil
		}
		// The next pass starts right after the last key passed.
		lo = append(kvs[len(kvs)-1][0], 0)
	}
}

// scanMerged calls fn for the keys k of st (nil: none) and ov with
// lo <= k < hi in byte order, the overlay's write winning, its deletes
// skipped, until fn returns false or an error.
func scanMerged(st *store.Store, ov *overlay, lo, hi []byte, fn func(key, value []byte) (bool, error)) error {
	var err error
	keys := ov.keys()
	// The overlay's keys in [lo, hi).
	from, _ := slices.BinarySearch(keys, string(lo))
	to := len(keys)
	if hi != nil {
		to, _ = slices.BinarySearch(keys, string(hi))
	}
	keys = keys[from:max(from, to)]
	stopped := false
	// emit passes the overlay's write of k (a delete is skipped).
	emit := func(k string) (bool, error) {
		w := ov.m[k]
		if w.Delete {
			return true, nil
		}
		return fn(w.Key, w.Value)
	}
	if st != nil {
		err = st.Scan(lo, hi, func(k, val []byte) (bool, error) {
			for len(keys) > 0 && keys[0] < string(k) {
				more, err := emit(keys[0])
				keys = keys[1:]
				if err != nil || !more {
					stopped = true
					return false, err
				}
			}
			if len(keys) > 0 && keys[0] == string(k) {
				more, err := emit(keys[0])
				keys = keys[1:]
				if err != nil || !more {
					stopped = true
				}
				return more && err == nil, err
			}
			more, err := fn(k, val)
			if err != nil || !more {
				stopped = true
			}
			return more && err == nil, err
		})
		if err != nil || stopped {
			return err
		}
	}
	for _, k := range keys {
		more, err := emit(k)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// byKey returns the overlay's operations by state key.
func (o *timerOverlay) byKey() map[string][]process.TimerOp {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := make(map[string][]process.TimerOp)
	for _, op := range o.m {
		m[string(op.Key)] = append(m[string(op.Key)], op)
	}
	return m
}

// keyTimers returns a batch.Params.KeyTimers: every timer of a key, of
// the timer store and the open transaction (open, by state key, made at
// the first call: the overlay does not change while a batch runs).
func (t *Task) keyTimers() func(key []byte, fn func(process.Timer) error) error {
	var open map[string][]process.TimerOp
	return func(key []byte, fn func(process.Timer) error) error {
		if !t.enter() {
			return ErrClosed
		}
		defer t.leave()
		ov := t.open.timers
		if open == nil {
			open = ov.byKey()
		}
		if t.timers != nil {
			err := t.timers.KeyTimers(key, func(name string, kind uint8, due int64) (bool, error) {
				if op, ok := ov.m[string(store.TimerKey(key, name))]; ok && !op.Hint {
					return true, nil // replaced or cancelled by the open transaction
				}
				return true, fn(process.Timer{Key: key, Name: name, Kind: process.TimeKind(kind), Due: due})
			})
			if err != nil {
				return err
			}
		}
		for _, op := range open[string(key)] {
			if !op.Cancel {
				if err := fn(op.Timer); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// due calls fn for every timer of kind due at or before upTo, of the timer
// store and the open transaction, in ascending order of due time, state
// key and name (store.CompareDue), until fn returns false or an error.
func (t *Task) due(kind process.TimeKind, upTo int64, fn func(process.Timer) (bool, error)) error {
	if !t.enter() {
		return ErrClosed
	}
	defer t.leave()
	ov := t.open.timers
	pending := ov.dueUpTo(kind, upTo)
	stopped := false
	call := func(tm process.Timer) (bool, error) {
		more, err := fn(tm)
		if err != nil || !more {
			stopped = true
			return false, err
		}
		return true, nil
	}
	if t.timers != nil {
		err := t.timers.Due(uint8(kind), upTo, func(key []byte, name string, due int64) (bool, error) {
			tk := store.TimerKey(key, name)
			if op, ok := ov.m[string(tk)]; ok && !op.Hint {
				return true, nil // replaced or cancelled by the open transaction
			}
			at := timerAt{tk: string(tk), due: due, op: process.TimerOp{Timer: process.Timer{Key: key, Name: name}}}
			for len(pending) > 0 && cmpTimerAt(pending[0], at) < 0 {
				op := pending[0].op
				pending = pending[1:]
				if more, err := call(op.Timer); !more {
					return false, err
				}
			}
			return call(process.Timer{Key: bytes.Clone(key), Name: name, Kind: kind, Due: due})
		})
		if err != nil || stopped {
			return err
		}
	}
	for _, p := range pending {
		if more, err := call(p.op.Timer); !more {
			return err
		}
	}
	return nil
}

// NextWallDue returns when the earliest wall-clock timer of the task is
// due (committed or set in the open transaction), and false when it has
// none. Cheap: one index seek, plus the committed timers the open
// transaction replaced.
func (t *Task) NextWallDue() (time.Time, bool, error) {
	if t.timers == nil {
		return time.Time{}, false, nil
	}
	next, found := int64(math.MaxInt64), false
	err := t.due(process.WallClock, math.MaxInt64, func(tm process.Timer) (bool, error) {
		next, found = tm.Due, true
		return false, nil
	})
	if err != nil || !found {
		return time.Time{}, false, err
	}
	return time.UnixMilli(next), true, nil
}

// TimersDue reports whether a timer of the task is due now: an
// event-time timer due by the task's stream time, or a wall-clock timer
// due by now (committed or set in the open transaction, as Tick sees
// them). A batch fires at most Config.MaxTimers timers of keys without
// records, and a timer its callback set again in the past fires
// in the next batch: the engine ticks again while this holds. Cheap: one
// index seek per kind, plus the committed timers the open transaction
// replaced.
func (t *Task) TimersDue() (bool, error) {
	if t.timers == nil {
		return false, nil
	}
	found := false
	first := func(process.Timer) (bool, error) { found = true; return false, nil }
	if err := t.due(process.EventTime, t.stream, first); err != nil || found {
		return found, err
	}
	err := t.due(process.WallClock, time.Now().UnixMilli(), first)
	return found, err
}

// HasTimers reports whether the task keeps timers (its processor sets
// timers or expires state): the engine then calls Tick when a wall-clock
// timer is due.
func (t *Task) HasTimers() bool { return t.sp != nil && t.sp.Timers() }

// reads counts the store reads in progress (of the buckets of a batch),
// apart from mu: a read may call user code (a Scan's fn) that reads
// again, and Close must wait for the reads before it closes the stores.
type reads struct {
	mu     sync.Mutex
	idle   sync.Cond
	n      int
	closed bool
}

// enter starts a read; false when the task is closed.
func (t *Task) enter() bool {
	r := &t.reads
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.n++
	return true
}

func (t *Task) leave() {
	r := &t.reads
	r.mu.Lock()
	r.n--
	if r.n == 0 && r.idle.L != nil {
		r.idle.Broadcast()
	}
	r.mu.Unlock()
}

// closeReads refuses new reads and waits for those in progress.
func (t *Task) closeReads() {
	r := &t.reads
	r.mu.Lock()
	r.closed = true
	if r.idle.L == nil {
		r.idle.L = &r.mu
	}
	for r.n > 0 {
		r.idle.Wait()
	}
	r.mu.Unlock()
}

// KeepsState reports whether proc keeps any local state: a default store
// (Stateful), named stores or timers. Only such a processor's tasks open
// stores, and only they have standby replicas.
func KeepsState(proc process.Processor) bool {
	if proc.Stateful() {
		return true
	}
	sp, ok := proc.(process.Stores)
	return ok && (len(sp.Stores()) > 0 || sp.Timers())
}
