package transformer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// TimeKind says which clock a timer or a TTL follows: EventTime or
// WallClock.
type TimeKind = process.TimeKind

const (
	// EventTime is the task's stream time: the largest timestamp of the
	// input records its partition has seen (in this batch and before: it
	// survives restarts), as Kafka Streams defines it. It never goes back
	// and it only advances with records.
	EventTime = process.EventTime
	// WallClock is the clock of the machine that runs the task, read once
	// per batch.
	WallClock = process.WallClock
)

// Timer is a timer of a state key, as its callback (OnTimer) receives it.
type Timer struct {
	// Key is the state key the timer belongs to.
	Key  []byte
	Name string
	Kind TimeKind
	// Due is when it was due (millisecond precision).
	Due time.Time
}

// Reserved timer names (a user timer's name must not start with 0x00).
const (
	ttlTimer      = "\x00ttl"
	storeTTLTimer = "\x00ttl:"
)

// storeNameRE is what a store's name must match: it names a directory and
// the store's changelog topic.
var storeNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// reservedStoreNames are the names the store layer keeps for itself, and
// why: a named store's directory is {partition}.{name}.
var reservedStoreNames = map[string]string{
	"timers": "it names the stage's timer store",
	"lock":   "{partition}.lock is the lock file of the default store",
}

// Store is a named key-value store of a stage, beside the per-key state
// of its transform: values of type V, encoded by its codec, under any key
// of the task's partition. Declare it with NewStore, list it in the
// stage's Stores option, and read and write it from the transform and the
// timer callbacks through their out (an *Emitter or *Outputs):
//
//	seen := transformer.NewStore[bool]("seen", nil)
//	st := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
//		if _, dup, err := seen.Get(out, rec.Value); err != nil || dup {
//			return err
//		}
//		return seen.Put(out, rec.Value, true)
//	}, transformer.Stores(seen))
//
// Its changelog is the topic {application id}-{name}-changelog, with the
// partitions and configuration of the default changelog; its local state
// is a store of its own. Writes commit in the task's transaction with the
// outputs; the last write per key of a transaction is what the changelog
// gets. A Store may be listed by several stages; each has its own data.
//
// Reads see the task's committed state and its open transaction's writes
// as of the batch's start, under the writes of the same state key's
// earlier calls of the batch and of the call itself; writes of other
// state keys' calls of the same batch are not visible (they run
// concurrently): reads are deterministic. When calls of several state
// keys of a batch write the same store key, the one whose state key came
// first in the batch (by its first record; keys with only timers after,
// by their first due timer) is overwritten by the later ones.
type Store[V any] struct {
	base  storeBase
	codec Codec[V]
}

// StoreDef is a store a stage lists in its Stores option: a *Store.
type StoreDef interface{ storeDef() *storeBase }

// storeBase is the untyped part of a Store.
type storeBase struct {
	name    string
	codec   any
	ttl     time.Duration
	ttlKind TimeKind
	err     error
}

func (s *Store[V]) storeDef() *storeBase { return &s.base }

// StoreOpt configures a Store.
type StoreOpt interface{ applyStore(*storeBase) }

type storeOpt func(*storeBase)

func (f storeOpt) applyStore(b *storeBase) { f(b) }

// StoreTTL expires the keys of a store that were not written for d, by
// kind's clock: a Put (re)arms the key's expiry at the current time plus d
// (event time: the stream time after the record being processed; wall
// clock: the batch's time), rounded up to a multiple of d/64, a Delete
// disarms it. A key thus expires between d and d + d/64 after its last
// write, never before; writes in one span of d/64 keep one expiry, which
// costs nothing more at commit. An expired key is deleted in a
// transaction (a tombstone on the store's changelog). The
// expiry is a timer of the store key (a state key of the task), so the
// stage keeps a timer store; it fires in that key's place. A key that
// keeps being written never expires: an expiry loses to a write (Put or
// Delete) of the same store key by another state key's call of the very
// batch in which it fires, whatever their order in the batch; the expiry
// then deletes nothing and that write's re-arming (or disarming) stands.
// d must be positive.
func StoreTTL(d time.Duration, kind TimeKind) StoreOpt {
	return storeOpt(func(b *storeBase) {
		b.ttl, b.ttlKind = d, kind
		if err := checkTTL("StoreTTL", d, kind); err != nil {
			b.err = err
		}
	})
}

// NewStore declares a named store of values of V encoded by codec (nil:
// JSON). The name must match ^[a-z0-9][a-z0-9_-]{0,63}$ and must not be
// "timers" or "lock" (reserved by the store layer): a bad name is
// reported by the Validate of every stage listing the store.
func NewStore[V any](name string, codec Codec[V], opts ...StoreOpt) *Store[V] {
	if codec == nil {
		codec = JSON[V]()
	}
	s := &Store[V]{base: storeBase{name: name, codec: codec}, codec: codec}
	for _, o := range opts {
		o.applyStore(&s.base)
	}
	return s
}

// Name returns the store's name.
func (s *Store[V]) Name() string { return s.base.name }

// Codec returns the store's codec.
func (s *Store[V]) Codec() Codec[V] { return s.codec }

// Stores lists the stage's named stores. Listing none still gives the
// transform the reads of other keys' state (Emitter.StateOf,
// Emitter.RangeState). Problems (a bad, duplicate or reserved name, a
// nil store) are reported by Validate with flechtwerk.CodeInvalidTransformer.
func Stores(stores ...StoreDef) Opt {
	return optFunc(func(c *cfg) {
		c.storesSet = true
		c.stores = append(c.stores, stores...)
	})
}

// StateTTL expires the state of a key that was not written for d, by
// kind's clock: the key expires at the time of its last SetState
// (EventTime: the stream time after the record being processed, so a key
// expires once records of any keys with timestamps d past its last write
// arrive; WallClock: the batch's time) plus d, rounded up to a multiple
// of d/64; DeleteState disarms it. A key thus expires between d and
// d + d/64 after its last write, never before. When it is due, the
// OnExpire callback (if any) runs with the state, then the state is
// deleted: a tombstone on the changelog, in the task's transaction with
// the callback's outputs.
//
// SetState stamps the state with the time of the write, kept with it in
// the store and on its changelog record (header flechtwerk.stamp), so
// restores and standbys keep it. The expiry is a timer of the key, a
// hint at or before the expiry: set by the write of a key without one,
// and left alone by later writes, which so cost it no timer record and no
// due-index move (at most a read at commit, for a key that neither the
// open nor the last transaction wrote). When the hint is due and the
// stamp says the key was written since, the timer moves to the stamp's
// expiry instead (nothing fires; about a timer record per d while the key
// keeps being written). A due hint whose expiry is later but also due
// moves there first, so that the expiry fires at its own time, in due
// order with the key's other timers.
// The sweep costs one index seek per batch plus the due keys, never a
// scan of the store. The key's own timers (SetTimer) outlive its expiry:
// their callback then gets no state (Emitter.HadState is false). A stage
// run again without StateTTL leaves state alone when the expiry timers of
// the earlier run come due; a state whose expiry timer comes due without
// a stamp of the TTL's clock (last written without StateTTL, or with the
// other clock) is stamped then and expires d after it. d must be
// positive; a stateless stage has no state to expire (Validate reports
// both).
func StateTTL(d time.Duration, kind TimeKind) Opt {
	return optFunc(func(c *cfg) { c.ttl, c.ttlKind, c.ttlSet = d, kind, true })
}

// OnExpire sets the callback that runs when a key's state expires
// (StateTTL), before it is deleted, with the key and its last state; it
// sends final outputs through out (outputs without a Timestamp get the
// expiry's due time, or the batch's time for WallClock) and may use the
// stage's stores. An error fails the batch like a transform's (a
// *TimerError). S must be the stage's state type and StateTTL must be
// set (Validate reports both).
func OnExpire[S any](fn func(ctx context.Context, key []byte, state S, out *Outputs) error) Opt {
	return optFunc(func(c *cfg) { c.onExpire = fn })
}

// OnTimer sets the callback of the stage's timers (Emitter.SetTimer,
// Emitter.SetWallTimer): when a timer is due, fn runs in its key's place
// with the key's state and an emitter that sets or deletes that state,
// sends outputs (those without a Timestamp get the timer's due time for
// EventTime, the batch's time for WallClock) and sets timers. S must be
// the stage's state type (Validate reports a mismatch with
// flechtwerk.CodeInvalidTransformer). A Transformer with a method
//
//	OnTimer(ctx context.Context, t Timer, state S, out *Emitter[S]) error
//
// needs no option; the option wins over the method.
func OnTimer[S any](fn func(ctx context.Context, t Timer, state S, out *Emitter[S]) error) Opt {
	return optFunc(func(c *cfg) { c.onTimer = fn })
}

// TimerTransformer is a Transformer whose timers call OnTimer (see the
// OnTimer option).
type TimerTransformer[S any] interface {
	Transformer[S]
	OnTimer(ctx context.Context, t Timer, state S, out *Emitter[S]) error
}

func checkTTL(field string, d time.Duration, kind TimeKind) error {
	if d <= 0 {
		return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, field, "the TTL must be positive, got %v", d)
	}
	if kind != EventTime && kind != WallClock {
		return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, field, "the clock must be transformer.EventTime or transformer.WallClock, got %d", kind)
	}
	return nil
}

// storesCfg is the stores and timers part of a stage; nil for a stage
// without any.
type storesCfg struct {
	// stateCodec is the stage's Codec[S] (nil: stateless).
	stateCodec any
	stores     []*storeBase
	specs      []process.StoreSpec
	ttl        time.Duration
	ttlKind    TimeKind
	// timers: the stage keeps timers (a callback or a TTL); callback:
	// it has a timer callback, which user timers (SetTimer) need.
	timers   bool
	callback bool
}

// index returns the index of b among the stage's stores, -1 when it does
// not list it.
func (sc *storesCfg) index(b *storeBase) int {
	for i, x := range sc.stores {
		if x == b {
			return i
		}
	}
	return -1
}

// buildStores checks the stores and timers options of a stage and returns
// its storesCfg (nil when it uses none of them). hasTimer is whether it
// has a timer callback; stateless whether it keeps no state.
func buildStores(c cfg, hasTimer, hasExpire, stateless bool) (*storesCfg, error) {
	if !c.storesSet && !c.ttlSet && !hasTimer && !hasExpire {
		return nil, nil
	}
	var errs []error
	sc := &storesCfg{timers: hasTimer, callback: hasTimer}
	seen := map[string]bool{}
	for i, d := range c.stores {
		if d == nil || isNilStore(d) {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "Stores", "store %d is nil", i))
			continue
		}
		b := d.storeDef()
		field := fmt.Sprintf("store %q", b.name)
		switch {
		case reservedStoreNames[b.name] != "":
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, field, "the name %q is reserved: %s", b.name, reservedStoreNames[b.name]))
		case !storeNameRE.MatchString(b.name):
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, field, "a store name must match %s (it names a directory and the changelog topic)", storeNameRE))
		case seen[b.name]:
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, field, "listed twice: store names of a stage are unique"))
		}
		seen[b.name] = true
		if b.err != nil {
			errs = append(errs, fmt.Errorf("store %q: %w", b.name, b.err))
		}
		if b.ttl > 0 {
			sc.timers = true
		}
		sc.stores = append(sc.stores, b)
		sc.specs = append(sc.specs, process.StoreSpec{Name: b.name})
	}
	if c.ttlSet {
		if err := checkTTL("StateTTL", c.ttl, c.ttlKind); err != nil {
			errs = append(errs, err)
		}
		sc.ttl, sc.ttlKind, sc.timers = c.ttl, c.ttlKind, true
	}
	if stateless {
		if c.ttlSet {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "StateTTL", "a stateless stage has no state to expire"))
		}
		if hasTimer {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "OnTimer", "timers belong to a state key: a stateless stage has none (build a stateful stage)"))
		}
		if hasExpire {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "OnExpire", "a stateless stage has no state to expire"))
		}
		for _, b := range sc.stores {
			if b.ttl > 0 {
				errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, fmt.Sprintf("store %q", b.name),
					"a StoreTTL expiry is a timer, which needs a stateful stage (its records' state keys)"))
			}
		}
	} else if hasExpire && !c.ttlSet {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "OnExpire", "OnExpire runs when state expires: it needs StateTTL"))
	}
	return sc, errors.Join(errs...)
}

// isNilStore reports whether d is a nil *Store of some type.
func isNilStore(d StoreDef) (isNil bool) {
	defer func() {
		if recover() != nil {
			isNil = true
		}
	}()
	return d.storeDef() == nil
}

// call is what a call of a stage with stores or timers reads and writes
// besides its state: the task's view, and the store writes and timer
// operations it made.
type call struct {
	sc  *storesCfg
	st  process.State
	key []byte // the state key of the call (nil: a stateless stage)
	// writes and timers in call order; over is the last write per store
	// and key, which the call's own reads see.
	writes []process.StoreWrite
	timers []process.TimerOp
	over   map[overKey]overVal
	// buf holds the first timer operations (a call sets a timer or
	// re-arms a TTL, rarely more).
	buf [2]process.TimerOp
}

// addTimer appends op to the call's timer operations.
func (c *call) addTimer(op process.TimerOp) {
	if c.timers == nil {
		c.timers = c.buf[:0]
	}
	c.timers = append(c.timers, op)
}

type overKey struct {
	store int
	key   string
}

type overVal struct {
	value []byte
	del   bool
}

// callOf returns the call of out, or an error (recorded as the call's
// failure) when out belongs to no call of a stage with stores.
func callOf(o *Outputs, what string) (*call, error) {
	if o.call == nil {
		return nil, o.fail(flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, what,
			"used outside a call of a stage with stores or timers (list the stores with transformer.Stores)"))
	}
	return o.call, nil
}

// storeIndex returns the index of s in c's stage, or an error.
func (c *call) storeIndex(o *Outputs, b *storeBase) (int, error) {
	i := c.sc.index(b)
	if i < 0 {
		return 0, o.fail(flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, fmt.Sprintf("store %q", b.name),
			"the stage does not list this store (transformer.Stores)"))
	}
	return i, nil
}

// write records a write to store i (of the stage's stores), and its TTL.
func (c *call) write(i int, key []byte, value []byte, del bool) {
	key = bytes.Clone(key)
	if c.over == nil {
		c.over = make(map[overKey]overVal)
	}
	c.over[overKey{i + 1, string(key)}] = overVal{value: value, del: del}
	c.writes = append(c.writes, process.StoreWrite{Store: i, Key: key, Value: value, Delete: del})
	if b := c.sc.stores[i]; b.ttl > 0 {
		c.arm(key, storeTTLTimer+b.name, b.ttl, b.ttlKind, del)
	}
}

// arm sets (cancel: cancels) the expiry timer name of key at now + d,
// rounded up (expiryDue).
func (c *call) arm(key []byte, name string, d time.Duration, kind TimeKind, cancel bool) {
	if cancel {
		c.addTimer(process.TimerOp{Timer: process.Timer{Key: key, Name: name, Kind: kind}, Cancel: true})
		return
	}
	c.addTimer(process.TimerOp{Timer: process.Timer{Key: key, Name: name, Kind: kind, Due: expiryDue(c.clock(kind), d)}})
}

// clock returns the call's time by kind's clock (Unix milliseconds).
func (c *call) clock(kind TimeKind) int64 {
	if kind == WallClock {
		return c.st.Now().UnixMilli()
	}
	return c.st.StreamTime()
}

// expiryDue returns now + d (Unix milliseconds) rounded up to a multiple
// of d/64 (at least 1ms): an expiry armed again within that span keeps its
// due time, and a timer set again at the due time it has costs no
// changelog record and no store write (store.Prepare).
func expiryDue(now int64, d time.Duration) int64 {
	if now > math.MaxInt64-d.Milliseconds() {
		return math.MaxInt64 // beyond the end of time: never
	}
	x := now + d.Milliseconds()
	g := max(d.Milliseconds()/64, 1)
	if x > math.MaxInt64-g {
		return x
	}
	q := x / g
	if x%g > 0 {
		q++ // x/g truncates toward zero: the ceiling of a negative x
	}
	return q * g
}

// get reads key of store (process index: DefaultStore or i+1) under the
// call's own writes.
func (c *call) get(store int, key []byte) ([]byte, bool, error) {
	if v, ok := c.over[overKey{store, string(key)}]; ok {
		return v.value, !v.del, nil
	}
	return c.st.Get(store, key)
}

// scan calls fn for the keys of store in [lo, hi) under the call's own
// writes (and own, a pending write of the default store's key).
func (c *call) scan(store int, lo, hi []byte, own *overEntry, fn func(key, value []byte) (bool, error)) error {
	in := func(k []byte) bool { return bytes.Compare(k, lo) >= 0 && (hi == nil || bytes.Compare(k, hi) < 0) }
	var ov []overEntry
	for k, v := range c.over {
		if k.store == store && in([]byte(k.key)) {
			ov = append(ov, overEntry{key: []byte(k.key), value: v.value, del: v.del})
		}
	}
	if own != nil && in(own.key) {
		ov = append(ov, *own)
	}
	if len(ov) == 0 {
		return c.st.Scan(store, lo, hi, fn)
	}
	slices.SortFunc(ov, func(a, b overEntry) int { return bytes.Compare(a.key, b.key) })
	return mergeScan(ov, func(f func(k, v []byte) (bool, error)) error { return c.st.Scan(store, lo, hi, f) }, fn)
}

type overEntry struct {
	key   []byte
	value []byte
	del   bool
}

// mergeScan calls fn for the keys of scan (ascending) with ov (sorted,
// its entries replacing or deleting scan's keys) merged in.
func mergeScan(ov []overEntry, scan func(func(k, v []byte) (bool, error)) error, fn func(key, value []byte) (bool, error)) error {
	i, stop := 0, false
	emit := func(k, v []byte) (bool, error) {
		more, err := fn(k, v)
		if !more || err != nil {
			stop = true
		}
		return more, err
	}
	err := scan(func(k, v []byte) (bool, error) {
		for i < len(ov) && bytes.Compare(ov[i].key, k) < 0 {
			e := ov[i]
			i++
			if e.del {
				continue
			}
			if more, err := emit(e.key, e.value); !more || err != nil {
				return false, err
			}
		}
		if i < len(ov) && bytes.Equal(ov[i].key, k) {
			e := ov[i]
			i++
			if e.del {
				return true, nil
			}
			return emit(e.key, e.value)
		}
		return emit(k, v)
	})
	if err != nil || stop {
		return err
	}
	for ; i < len(ov); i++ {
		if ov[i].del {
			continue
		}
		if more, err := fn(ov[i].key, ov[i].value); !more || err != nil {
			return err
		}
	}
	return nil
}

// Get returns the value of key in the store, as the call reads it (see
// Store), and whether there is one. A value that does not decode, or a
// store the stage does not list, is an error that also fails the call.
func (s *Store[V]) Get(out Sender, key []byte) (V, bool, error) {
	var zero V
	o := out.outputs()
	c, err := callOf(o, "store "+s.base.name)
	if err != nil {
		return zero, false, err
	}
	i, err := c.storeIndex(o, &s.base)
	if err != nil {
		return zero, false, err
	}
	b, ok, err := c.get(i+1, key)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.codec.Decode(b)
	if err != nil {
		return zero, false, o.fail(&storeCodecError{store: s.base.name, op: "decoding", key: key, err: err})
	}
	return v, true, nil
}

// Put sets the value of key in the store (and rearms its StoreTTL). An
// encode error, or an empty key (a compacted changelog refuses records
// without a key), fails the call.
func (s *Store[V]) Put(out Sender, key []byte, v V) error {
	o := out.outputs()
	c, err := callOf(o, "store "+s.base.name)
	if err != nil {
		return err
	}
	i, err := c.storeIndex(o, &s.base)
	if err != nil {
		return err
	}
	if err := s.base.checkKey(o, key); err != nil {
		return err
	}
	b, err := s.codec.Encode(v)
	if err != nil {
		return o.fail(&storeCodecError{store: s.base.name, op: "encoding", key: key, err: err})
	}
	if b == nil {
		b = []byte{} // nil is a tombstone on the changelog
	}
	c.write(i, key, b, false)
	return nil
}

// Delete removes key from the store (a tombstone on its changelog) and
// disarms its StoreTTL. Misuse (see Get) and an empty key fail the call.
func (s *Store[V]) Delete(out Sender, key []byte) {
	o := out.outputs()
	c, err := callOf(o, "store "+s.base.name)
	if err != nil {
		return
	}
	i, err := c.storeIndex(o, &s.base)
	if err != nil {
		return
	}
	if s.base.checkKey(o, key) != nil {
		return
	}
	c.write(i, key, nil, true)
}

// checkKey fails the call when key is empty: the store's changelog is
// compacted, and Kafka refuses a record without a key there, which would
// fail every commit of the record's transaction.
func (b *storeBase) checkKey(o *Outputs, key []byte) error {
	if len(key) > 0 {
		return nil
	}
	return o.fail(flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "store "+b.name,
		"a write with an empty key; a store key must not be empty (its compacted changelog refuses records without a key)"))
}

// Range calls fn for the keys k of the store with lo <= k < hi (hi nil:
// no upper bound), in ascending byte order, as the call reads them (see
// Store), until fn returns false. The key is valid only during fn.
func (s *Store[V]) Range(out Sender, lo, hi []byte, fn func(key []byte, v V) bool) error {
	o := out.outputs()
	c, err := callOf(o, "store "+s.base.name)
	if err != nil {
		return err
	}
	i, err := c.storeIndex(o, &s.base)
	if err != nil {
		return err
	}
	return c.scan(i+1, lo, hi, nil, func(k, b []byte) (bool, error) {
		v, err := s.codec.Decode(b)
		if err != nil {
			return false, o.fail(&storeCodecError{store: s.base.name, op: "decoding", key: k, err: err})
		}
		return fn(k, v), nil
	})
}

// Prefix is Range over the keys that start with p.
func (s *Store[V]) Prefix(out Sender, p []byte, fn func(key []byte, v V) bool) error {
	return s.Range(out, p, prefixEnd(p), fn)
}

// prefixEnd is the least key greater than every key starting with p (nil:
// none).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// storeCodecError is a store value that did not decode or encode; like a
// state codec error it is never an invalid record.
type storeCodecError struct {
	store string
	op    string
	key   []byte
	err   error
}

func (e *storeCodecError) Error() string {
	return fmt.Sprintf("transformer: %s value of key %q of store %q: %v", e.op, e.key, e.store, e.err)
}

func (e *storeCodecError) Unwrap() error { return (&stateCodecError{err: e.err}).Unwrap() }

// SetTimer sets (or replaces) the event-time timer name of the state key
// of the call, due when the task's stream time reaches at: the stage's
// OnTimer callback then runs (see OnTimer for the order). The name must
// not be empty nor start with 0x00 (reserved), and the stage must have a
// timer callback; otherwise the call fails with a
// flechtwerk.CodeInvalidTransformer error.
func (e *Emitter[S]) SetTimer(name string, at time.Time) { e.setTimer(name, EventTime, at) }

// SetWallTimer is SetTimer for a wall-clock timer: due when the clock of
// the machine running the task reaches at (checked at every batch; an
// idle task wakes for it).
func (e *Emitter[S]) SetWallTimer(name string, at time.Time) { e.setTimer(name, WallClock, at) }

// CancelTimer cancels the timer name of the call's state key, if set.
func (e *Emitter[S]) CancelTimer(name string) {
	if c := e.timerCall(name, "CancelTimer"); c != nil {
		c.addTimer(process.TimerOp{Timer: process.Timer{Key: c.key, Name: name}, Cancel: true})
	}
}

func (e *Emitter[S]) setTimer(name string, kind TimeKind, at time.Time) {
	field := "SetTimer"
	if kind == WallClock {
		field = "SetWallTimer"
	}
	if c := e.timerCall(name, field); c != nil {
		c.addTimer(process.TimerOp{Timer: process.Timer{Key: c.key, Name: name, Kind: kind, Due: at.UnixMilli()}})
	}
}

// timerCall returns the call a timer operation applies to, nil (and the
// call failed) when it is refused.
func (e *Emitter[S]) timerCall(name, field string) *call {
	c := e.call
	switch {
	case c == nil || !c.sc.callback:
		e.fail(flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, field,
			"timer %q: the stage has no timer callback (give it an OnTimer method or the OnTimer option)", name))
		return nil
	case c.key == nil:
		e.fail(flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, field,
			"timer %q: a timer belongs to a state key, and a stateless stage has none", name))
		return nil
	case name == "" || name[0] == 0:
		e.fail(flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, field,
			"timer name %q: a timer name must not be empty nor start with 0x00 (reserved)", name))
		return nil
	}
	return c
}

// StreamTime returns the task's stream time as the call sees it: in a
// record's call, the largest timestamp of the records up to and including
// it; in a timer's call, the stream time at which it fired. It is the
// task's, kept across batches and restarts (in the timer store, which
// every stage with stores or timers has). The zero time when the stage
// has no stores or timers.
func (o *Outputs) StreamTime() time.Time {
	if o.call == nil {
		return time.Time{}
	}
	return time.UnixMilli(o.call.st.StreamTime())
}

// Now returns the batch's wall-clock time (one value per batch, the
// clock of WallClock timers and TTLs), or time.Now() when the stage has
// no stores or timers.
func (o *Outputs) Now() time.Time {
	if o.call == nil {
		return time.Now()
	}
	return o.call.st.Now()
}

// StateOf returns the state of key (any key of the task's partition), as
// the call reads it: for the call's own key, the state it set or deleted
// so far, else the state it began with; for another key, the state
// committed and written by the task's open transaction before the batch
// began (other keys' calls of the same batch are not visible). It needs a
// stage with stores or timers (a Stores option, even listing none).
func (e *Emitter[S]) StateOf(key []byte) (S, bool, error) {
	var zero S
	c, err := callOf(&e.Outputs, "StateOf")
	if err != nil {
		return zero, false, err
	}
	if c.key != nil && bytes.Equal(key, c.key) && e.op != 0 {
		return e.state, e.op == process.Put, nil
	}
	b, ok, err := c.st.Get(process.DefaultStore, key)
	if err != nil || !ok {
		return zero, false, err
	}
	s, err := c.sc.stateCodec.(Codec[S]).Decode(b)
	if err != nil {
		return zero, false, e.fail(&stateCodecError{op: "decoding", key: key, err: err})
	}
	return s, true, nil
}

// RangeState calls fn for the state of the keys k of the task's partition
// with lo <= k < hi (hi nil: no upper bound), in ascending byte order, as
// StateOf reads them, until fn returns false.
func (e *Emitter[S]) RangeState(lo, hi []byte, fn func(key []byte, state S) bool) error {
	c, err := callOf(&e.Outputs, "RangeState")
	if err != nil {
		return err
	}
	codec := c.sc.stateCodec.(Codec[S])
	var own *overEntry
	if c.key != nil && e.op != 0 {
		own = &overEntry{key: c.key, del: e.op == process.Delete}
		if e.op == process.Put {
			if own.value, err = codec.Encode(e.state); err != nil {
				return e.fail(&stateCodecError{op: "encoding", key: c.key, err: err})
			}
		}
	}
	return c.scan(process.DefaultStore, lo, hi, own, func(k, b []byte) (bool, error) {
		s, err := codec.Decode(b)
		if err != nil {
			return false, e.fail(&stateCodecError{op: "decoding", key: k, err: err})
		}
		return fn(k, s), nil
	})
}

// storesAdapter is the engine's view of a *Stage[S] with stores or
// timers: a process.Stores. A stage without them is a plain adapter.
type storesAdapter[S any] struct{ adapter[S] }

// Stores returns the stage's named stores, in the order of its Stores
// option.
func (a storesAdapter[S]) Stores() []process.StoreSpec { return a.t.sc.specs }

// Timers reports true for every stage with stores, timers or a TTL: the
// timer store also holds the task's stream time (StreamTime), which must
// not depend on how records are chunked into batches, nor restart from 0
// after a restart. Such a stage so always has a timer store and its
// changelog ({application id}-timers-changelog).
func (a storesAdapter[S]) Timers() bool { return true }

// callEmitter is a call and its emitter, made by one allocation.
type callEmitter[S any] struct {
	c call
	e Emitter[S]
}

// ProcessState is Process reading st, with the call's store writes and
// timer operations (its state TTL's included) in the result.
func (a storesAdapter[S]) ProcessState(ctx context.Context, in process.Input, state []byte, found bool, st process.State) (process.Result, error) {
	ce := &callEmitter[S]{c: call{sc: a.t.sc, st: st}}
	c := &ce.c
	if a.t.stateless == nil {
		c.key = in.Key
	}
	res, err := a.process(ctx, in, state, found, c, &ce.e)
	if err != nil {
		return res, err
	}
	err = a.finish(&res, c, state, found)
	return res, err
}

// Fire runs the callback of timer pt: OnTimer for a user timer; for the
// state's expiry OnExpire (when the key has state) then a delete; for a
// store key's expiry a delete of it.
func (a storesAdapter[S]) Fire(ctx context.Context, pt process.Timer, state []byte, found bool, st process.State) (process.Result, error) {
	t := a.t
	c := &call{sc: t.sc, st: st, key: pt.Key}
	in := process.Input{Key: pt.Key}
	var (
		res process.Result
		err error
	)
	switch {
	case pt.Name == ttlTimer && t.sc.ttl == 0:
		// Left by the stage when it had a StateTTL: nothing expires.
		return res, nil
	case pt.Name == ttlTimer:
		if sc := t.sc; found {
			// The expiry is a hint (finish): the state expires only
			// when its last write's stamp says so; else the expiry
			// moves to the stamp's.
			s, ok, err := st.Stamp(pt.Key)
			if err != nil {
				return res, err
			}
			now := c.clock(sc.ttlKind)
			if !ok || s.Kind != sc.ttlKind {
				// No stamp of the TTL's clock (the state was last
				// written without StateTTL, or with another clock):
				// its expiry counts from now, stamped on the state.
				return process.Result{Op: process.Put, State: state, Stamp: process.Stamp{Kind: sc.ttlKind, At: now, Timers: s.Timers},
					Timers: []process.TimerOp{{Timer: process.Timer{Key: pt.Key, Name: ttlTimer, Kind: sc.ttlKind, Due: expiryDue(now, sc.ttl)}}}}, nil
			}
			if due := expiryDue(s.At, sc.ttl); due > now || due > pt.Due {
				return process.Result{Timers: []process.TimerOp{{Timer: process.Timer{Key: pt.Key, Name: ttlTimer, Kind: sc.ttlKind, Due: due}}}}, nil
			}
		}
		if t.onExpire != nil && found {
			res, err = a.stateful(in, state, found, c, nil, func(s S, e *Emitter[S]) error { return t.onExpire(ctx, pt.Key, s, &e.Outputs) })
		}
		res.Op, res.State = process.Delete, nil
		if err == nil && found {
			err = c.settle(c.key)
		}
	case len(pt.Name) > len(storeTTLTimer) && pt.Name[:len(storeTTLTimer)] == storeTTLTimer:
		for i, b := range t.sc.stores {
			if b.name == pt.Name[len(storeTTLTimer):] {
				c.writes = append(c.writes, process.StoreWrite{Store: i, Key: bytes.Clone(pt.Key), Delete: true})
			}
		}
		return process.Result{Writes: c.writes}, nil
	case pt.Name == "" || pt.Name[0] == 0:
		// A reserved name of a later version: nothing to run.
		return res, nil
	default:
		if found {
			// The timer store may hold a carried timer early (a hint),
			// or of the clock it had before its last set: the key's
			// stamp has its due time.
			s, _, err := st.Stamp(pt.Key)
			if err != nil {
				return res, err
			}
			if ct, ok := s.Timer(pt.Name); ok && (ct.Kind != pt.Kind || ct.Due > pt.Due) {
				// Moved there, it fires when due: now, if it is, in
				// its due order.
				return process.Result{Moved: true, Timers: []process.TimerOp{{Timer: process.Timer{Key: pt.Key, Name: pt.Name, Kind: ct.Kind, Due: ct.Due}}}}, nil
			}
		}
		// The fired timer is gone, from the key's stamp too, unless the
		// callback sets it again. Without a callback (a timer left by a
		// run of the stage that had one), nothing runs.
		c.addTimer(process.TimerOp{Timer: process.Timer{Key: pt.Key, Name: pt.Name}, Cancel: true})
		if t.onTimer != nil {
			tm := Timer{Key: pt.Key, Name: pt.Name, Kind: pt.Kind, Due: time.UnixMilli(pt.Due)}
			res, err = a.stateful(in, state, found, c, nil, func(s S, e *Emitter[S]) error { return t.onTimer(ctx, tm, s, e) })
		}
	}
	if err != nil {
		return res, err
	}
	if pt.Name == ttlTimer {
		res.Writes, res.Timers = c.writes, c.timers
		return res, nil
	}
	err = a.finish(&res, c, state, found)
	return res, err
}

// StateExpiry returns when a state stamped s expires by the stage's
// StateTTL (Unix milliseconds), and false without a TTL of s's clock.
func (a storesAdapter[S]) StateExpiry(s process.Stamp) (int64, bool) {
	if sc := a.t.sc; sc.ttl > 0 && s.Kind == sc.ttlKind {
		return expiryDue(s.At, sc.ttl), true
	}
	return 0, false
}

// finish adds the writes and timer operations of c to res, the key's
// carried timers (carry), and the state TTL's arming or disarming when
// res writes the key's state.
//
// A put stamps the state with its time by the TTL's clock and sets the
// expiry timer as a hint (process.TimerOp.Hint) at the time it expires
// by that stamp: a key that has a timer keeps it, so that writing a key
// again costs its expiry no timer record. When that earlier timer fires,
// Fire reads the stamp and moves the timer to the stamp's expiry if the
// key was written since: a key that keeps being written costs its expiry
// about a timer record per TTL, not one per transaction.
func (a storesAdapter[S]) finish(res *process.Result, c *call, state []byte, found bool) error {
	sc := a.t.sc
	var (
		prev   process.Stamp
		forced bool
	)
	if c.key != nil {
		// A stage without a callback keeps the timers a run with one
		// left (it sets none).
		var err error
		if prev, forced, err = c.carry(res, state, found); err != nil {
			return err
		}
	}
	if sc.ttl > 0 && c.key != nil {
		switch {
		case forced:
			// Written for its carried timers only: its TTL's stamp
			// stays, and so does its expiry, hinted again as every
			// stamped write does (a run without the TTL may have
			// dropped the timer; a batch skips the hint of a key
			// whose recent stamp set it).
			res.Stamp.Kind, res.Stamp.At = prev.Kind, prev.At
			if prev.Kind == sc.ttlKind {
				c.addTimer(process.TimerOp{Timer: process.Timer{Key: c.key, Name: ttlTimer, Kind: sc.ttlKind, Due: expiryDue(prev.At, sc.ttl)}, Hint: true})
			}
		case res.Op == process.Put:
			at := c.clock(sc.ttlKind)
			res.Stamp.Kind, res.Stamp.At = sc.ttlKind, at
			c.addTimer(process.TimerOp{Timer: process.Timer{Key: c.key, Name: ttlTimer, Kind: sc.ttlKind, Due: expiryDue(at, sc.ttl)}, Hint: true})
		case res.Op == process.Delete:
			c.arm(c.key, ttlTimer, sc.ttl, sc.ttlKind, true)
		}
	} else if forced {
		res.Stamp.Kind, res.Stamp.At = prev.Kind, prev.At
	}
	res.Writes, res.Timers = c.writes, c.timers
	return nil
}

// maxCarried bounds the timers a key's state carries, and so what each
// of its writes encodes.
const maxCarried = 8

// ownTimer reports whether op is on a timer the stage set for key (not a
// TTL's expiry, whose names are reserved).
func ownTimer(op process.TimerOp, key []byte) bool {
	return op.Name != "" && op.Name[0] != 0 && bytes.Equal(op.Key, key)
}

// carry keeps the key's timers in its state's stamp (process.Stamp.Timers)
// when the call writes its state, so that a timer set again later costs
// no timer record: a put carries the timers of the key's last stamp
// under the call's operations on them, and the timers the call sets on a
// key that had state; their sets become hints (the timer store keeps an
// earlier due time, which Fire then moves to the carried one). A call
// that changes a carried timer without writing the state writes it as it
// is (forced, with the last stamp's time). A delete drops the stamp: the
// timers it carried are set where it had them. It returns the key's last
// stamp (prev).
func (c *call) carry(res *process.Result, state []byte, found bool) (prev process.Stamp, forced bool, err error) {
	own := false
	for _, op := range c.timers {
		if ownTimer(op, c.key) {
			own = true
			break
		}
	}
	if !own && res.Op == process.Keep {
		return prev, false, nil
	}
	if prev, _, err = c.st.Stamp(c.key); err != nil {
		return prev, false, err
	}
	if res.Op == process.Delete {
		c.settleFrom(prev)
		return prev, false, nil
	}
	// carried is prev's, which the call may change in place
	// (process.State.Stamp), until it adds or removes one.
	carried, changed, copied := prev.Timers, false, false
	change := func() {
		if !copied {
			carried, copied = append(make([]process.Timer, 0, len(carried)+1), carried...), true
		}
		changed = true
	}
	for _, op := range c.timers {
		if !ownTimer(op, c.key) {
			continue
		}
		i := slices.IndexFunc(carried, func(t process.Timer) bool { return t.Name == op.Name })
		switch {
		case op.Cancel && i >= 0:
			change()
			carried = slices.Delete(carried, i, i+1)
		case op.Cancel:
			// Not carried: the cancel removes it from the timer store.
		case i >= 0:
			if carried[i].Kind != op.Kind || carried[i].Due != op.Due {
				carried[i].Kind, carried[i].Due, changed = op.Kind, op.Due, true
			}
		case res.Op == process.Put && found && len(carried) < maxCarried:
			// A timer of a key that had no state (its first
			// record, most often) is set where it is due: a timer
			// set once costs its key's writes nothing. So are the
			// timers beyond maxCarried.
			change()
			carried = append(carried, process.Timer{Name: op.Name, Kind: op.Kind, Due: op.Due})
		}
	}
	if res.Op == process.Keep {
		// Timers the stamp does not carry stay in the timer store
		// alone; a change to one it carries rewrites the state.
		if !changed || !found {
			return prev, false, nil
		}
		res.Op, res.State, forced = process.Put, state, true
	}
	for i, op := range c.timers {
		if ownTimer(op, c.key) && !op.Cancel && slices.ContainsFunc(carried, func(t process.Timer) bool { return t.Name == op.Name }) {
			c.timers[i].Hint = true
		}
	}
	res.Stamp.Timers = carried
	return prev, forced, nil
}

// settle sets the timers key's stamp carries where the stamp has them,
// before its state is deleted (see carry).
func (c *call) settle(key []byte) error {
	prev, _, err := c.st.Stamp(key)
	if err == nil {
		c.settleFrom(prev)
	}
	return err
}

// settleFrom sets the timers prev carries that the call did not set or
// cancel at the due times prev has, and makes the call's sets of the
// key's timers plain sets.
func (c *call) settleFrom(prev process.Stamp) {
	for i, op := range c.timers {
		if ownTimer(op, c.key) {
			c.timers[i].Hint = false
		}
	}
	for _, t := range prev.Timers {
		if slices.ContainsFunc(c.timers, func(op process.TimerOp) bool { return ownTimer(op, c.key) && op.Name == t.Name }) {
			continue
		}
		t.Key = c.key
		c.addTimer(process.TimerOp{Timer: t})
	}
}
