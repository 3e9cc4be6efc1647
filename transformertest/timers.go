package transformertest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Reserved timer names of the TTLs (package transformer).
const (
	ttlTimer      = "\x00ttl"
	storeTTLTimer = "\x00ttl:"
)

// timerID is a timer's identity: its state key and name.
type timerID struct{ key, name string }

// memView is a task's view of partition p for one batch: the committed
// stores, timers and stream time, and the batch's clock. Committed maps
// change only at commit, under d.mu, after the batch ran.
type memView struct {
	d   *Driver
	p   int32
	now time.Time
}

func (d *Driver) viewOf(p int32, now time.Time) *memView { return &memView{d: d, p: p, now: now} }

// store returns the contents of process store index i.
func (v *memView) store(i int) map[string][]byte {
	if i == process.DefaultStore {
		return v.d.state[v.p]
	}
	if st := v.d.named[v.p]; i-1 < len(st) {
		return st[i-1]
	}
	return nil
}

func (v *memView) check(i int) error {
	if i < 0 || i > len(v.d.names) {
		return fmt.Errorf("transformertest: store %d: the stage has %d named stores", i, len(v.d.names))
	}
	return nil
}

func (v *memView) Get(i int, key []byte) ([]byte, bool, error) {
	if err := v.check(i); err != nil {
		return nil, false, err
	}
	b, ok := v.store(i)[string(key)]
	return clone(b), ok, nil
}

func (v *memView) Scan(i int, lo, hi []byte, fn func(key, value []byte) (bool, error)) error {
	if err := v.check(i); err != nil {
		return err
	}
	st := v.store(i)
	keys := make([]string, 0, len(st))
	for k := range st {
		if k >= string(lo) && (hi == nil || k < string(hi)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if more, err := fn([]byte(k), clone(st[k])); !more || err != nil {
			return err
		}
	}
	return nil
}

func (v *memView) StreamTime() int64 { return v.d.stream[v.p] }

func (v *memView) Now() time.Time { return v.now }

func (v *memView) Stamp(key []byte) (process.Stamp, bool, error) {
	s, ok := stamp.Decode(v.d.stamps[v.p][string(key)])
	return s, ok, nil
}

// due calls fn for the committed timers of kind due by upTo, ascending by
// (Due, Key, Name), as the task's timer store does.
func (v *memView) due(kind process.TimeKind, upTo int64, fn func(process.Timer) (bool, error)) error {
	var ts []process.Timer
	for _, t := range v.d.timers[v.p] {
		if t.Kind == kind && t.Due <= upTo {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, timerOrder)
	for _, t := range ts {
		if more, err := fn(t); !more || err != nil {
			return err
		}
	}
	return nil
}

func timerOrder(a, b process.Timer) int {
	if c := cmp.Compare(a.Due, b.Due); c != 0 {
		return c
	}
	if c := bytes.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// commitStores commits the store writes, timers and stream time of
// partition p's result, and reports them in b; d.mu is held.
func (d *Driver) commitStores(b *Batch, p int32, res *batch.Result) {
	if len(res.StoreWrites) > 0 && d.named[p] == nil {
		d.named[p] = make([]map[string][]byte, len(d.names))
		for i := range d.named[p] {
			d.named[p][i] = map[string][]byte{}
		}
	}
	for _, w := range res.StoreWrites {
		b.StoreWrites = append(b.StoreWrites, StoreWrite{Partition: p, Store: d.names[w.Store], Key: clone(w.Key), Value: clone(w.Value), Delete: w.Delete})
		if w.Delete {
			delete(d.named[p][w.Store], string(w.Key))
		} else {
			d.named[p][w.Store][string(w.Key)] = clone(w.Value)
		}
	}
	for _, op := range res.Timers {
		id := timerID{string(op.Key), op.Name}
		if op.Cancel {
			delete(d.timers[p], id)
			continue
		}
		if d.timers[p] == nil {
			d.timers[p] = map[timerID]process.Timer{}
		}
		if prev, ok := d.timers[p][id]; ok && op.Hint && prev.Kind == op.Kind && prev.Due <= op.Due {
			continue
		}
		t := op.Timer
		t.Key = clone(t.Key)
		d.timers[p][id] = t
	}
	for _, t := range res.FiredTimers {
		switch {
		case t.Name == ttlTimer:
			b.Expired = append(b.Expired, Expired{Partition: p, Key: clone(t.Key)})
		case strings.HasPrefix(t.Name, storeTTLTimer):
			b.Expired = append(b.Expired, Expired{Partition: p, Store: t.Name[len(storeTTLTimer):], Key: clone(t.Key)})
		case strings.HasPrefix(t.Name, "\x00"):
		default:
			b.Fired = append(b.Fired, Fired{Partition: p, Timer: userTimer(t)})
		}
	}
	d.stream[p] = max(d.stream[p], res.StreamTime)
	b.MoreDue = b.MoreDue || res.MoreDue
}

// SetNow sets the Driver's wall clock, which the next batches read (one
// value per batch, as a task does): wall-clock timers due by it fire in
// the next Process or Tick, and wall-clock TTLs count from it. Until the
// first SetNow, batches read the machine's clock.
func (d *Driver) SetNow(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.now = t
}

// Advance moves the Driver's wall clock by dur (from the machine's time
// when it was never set).
func (d *Driver) Advance(dur time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.now.IsZero() {
		d.now = time.Now()
	}
	d.now = d.now.Add(dur)
}

// Now returns the Driver's wall clock (the machine's until SetNow or
// Advance).
func (d *Driver) Now() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.now.IsZero() {
		return time.Now()
	}
	return d.now
}

// Tick runs a batch with no records in every task partition that has
// timers, as the runtime does between records while a timer is due (a
// wall-clock timer by now, an event-time timer by the stream time, at
// most one tick per 10ms): the timers due by the partition's
// stream time or the Driver's clock fire, and the batch commits like one
// of Process. A stage without timers: an empty batch. At most MaxTimers
// due timers fire per partition; Batch.MoreDue says when more are due.
func (d *Driver) Tick(ctx context.Context) (*Batch, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tick(ctx)
}

func (d *Driver) tick(ctx context.Context) (*Batch, error) {
	if d.closed {
		return nil, errors.New("transformertest: Tick after Close")
	}
	if err := d.open(ctx); err != nil {
		return nil, err
	}
	var parts []int32
	if d.sp != nil && d.sp.Timers() {
		for p, ts := range d.timers {
			if len(ts) > 0 {
				parts = append(parts, p)
			}
		}
	}
	if len(parts) == 0 {
		return &Batch{Offsets: map[string]map[int32]int64{}}, nil
	}
	slices.Sort(parts)
	return d.run(ctx, nil, parts, maps.Clone(d.topicIdx), map[string]map[int32]int64{}, 0)
}

// AdvanceStreamTime moves the stream time of every task partition the
// Driver has seen records or timers of to t (a partition already past t
// keeps its own: stream time never goes back), then ticks (Tick): the
// event-time timers due by then fire. The runtime's stream time advances
// with records only; this stands for records of other keys arriving.
func (d *Driver) AdvanceStreamTime(ctx context.Context, t time.Time) (*Batch, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sp == nil {
		return nil, errors.New("transformertest: AdvanceStreamTime: the stage has no stores or timers")
	}
	ms := t.UnixMilli()
	seen := map[int32]bool{}
	for _, ps := range d.next {
		for p := range ps {
			seen[p] = true
		}
	}
	for p := range d.timers {
		seen[p] = true
	}
	for p := range seen {
		d.stream[p] = max(d.stream[p], ms)
	}
	return d.tick(ctx)
}

// StreamTime returns the stream time of task partition p: the largest
// timestamp of its records so far (or AdvanceStreamTime's), the zero
// Unix time before any. Records the policy dropped because they did not
// decode do not count.
func (d *Driver) StreamTime(p int32) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return time.UnixMilli(d.stream[p])
}

// Timers returns the pending timers of key in task partition p that the
// stage set (Emitter.SetTimer, SetWallTimer), ascending by (Due, Name);
// TTL expiries are left out (see Expiry).
func (d *Driver) Timers(p int32, key []byte) []transformer.Timer {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ts []process.Timer
	s, _ := stamp.Decode(d.stamps[p][string(key)])
	for id, t := range d.timers[p] {
		if id.key == string(key) && !strings.HasPrefix(id.name, "\x00") {
			// A timer carried by the key's stamp may be held early.
			t.Kind, t.Due = stamp.Due(s, t.Name, t.Kind, t.Due)
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, timerOrder)
	out := make([]transformer.Timer, len(ts))
	for i, t := range ts {
		out[i] = userTimer(t)
	}
	return out
}

// Expiry returns when key of task partition p expires: its state (store
// "", transformer.StateTTL) or its entry in the named store (StoreTTL);
// false when no expiry is armed. A state's expiry is the TTL after its
// last write (rounded up as the stage does); its expiry timer, which
// Timers does not list, may be due earlier (a hint, see
// transformer.StateTTL).
func (d *Driver) Expiry(p int32, store string, key []byte) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name := ttlTimer
	if store != "" {
		name = storeTTLTimer + store
	}
	t, ok := d.timers[p][timerID{string(key), name}]
	if !ok {
		return time.Time{}, false
	}
	if store == "" {
		e, isE := d.sp.(interface {
			StateExpiry(process.Stamp) (int64, bool)
		})
		if s, ok := stamp.Decode(d.stamps[p][string(key)]); ok && isE {
			if at, ok := e.StateExpiry(s); ok {
				return time.UnixMilli(at), true
			}
		}
	}
	return time.UnixMilli(t.Due), true
}

// Expired returns every key expired so far, in commit order.
func (d *Driver) Expired() []Expired {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Expired
	for _, b := range d.batches {
		out = append(out, b.Expired...)
	}
	return out
}

// Fired returns every timer of the stage fired so far, in commit order.
func (d *Driver) Fired() []Fired {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Fired
	for _, b := range d.batches {
		out = append(out, b.Fired...)
	}
	return out
}

// RawStore returns a copy of the contents of the named store of task
// partition p, encoded, by key; nil when the stage has no such store.
func (d *Driver) RawStore(p int32, store string) map[string][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := slices.Index(d.names, store)
	if i < 0 {
		return nil
	}
	out := map[string][]byte{}
	if st := d.named[p]; i < len(st) {
		for k, v := range st[i] {
			out[k] = clone(v)
		}
	}
	return out
}

// StoreState returns the contents of store s in task partition p,
// decoded with its codec, by key. A value that does not decode is an
// error; a store the stage does not list is an error too.
func StoreState[V any](d *Driver, p int32, s *transformer.Store[V]) (map[string]V, error) {
	raw := d.RawStore(p, s.Name())
	if raw == nil {
		return nil, fmt.Errorf("transformertest: StoreState: the stage has no store %q", s.Name())
	}
	out := make(map[string]V, len(raw))
	for k, b := range raw {
		v, err := s.Codec().Decode(b)
		if err != nil {
			return nil, fmt.Errorf("transformertest: decoding key %q of store %q in partition %d: %w", k, s.Name(), p, err)
		}
		out[k] = v
	}
	return out, nil
}

func userTimer(t process.Timer) transformer.Timer {
	return transformer.Timer{Key: clone(t.Key), Name: t.Name, Kind: t.Kind, Due: time.UnixMilli(t.Due)}
}
