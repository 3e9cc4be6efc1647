package batch

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/internal/tracing"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// storesBatch is what a batch of a process.Stores processor knows besides
// its buckets: the stream time at every record and at its end, and the
// batch's wall-clock time.
type storesBatch struct {
	sp        process.Stores
	view      process.State
	due       func(kind process.TimeKind, upTo int64, fn func(t process.Timer) (bool, error)) error
	keyTimers func(key []byte, fn func(t process.Timer) error) error
	name      string
	partition int32
	// slab holds the buckets' own parts (newBucket); slabs are the
	// slabs of the batch.
	slab  []storesBucket
	slabs [][]storesBucket
	// at[i] is the stream time once ordered record i was seen (the
	// largest timestamp of the seen records up to and including it, and
	// of earlier batches); the stream time before it is at[i-1] (before
	// for i == 0).
	at          []int64
	before, end int64
	now         time.Time
	nowMs       int64
	// cutKind and cutDue: the first due timer of a key without records
	// that MaxTimers left for later (cutKind 0: none).
	cutKind process.TimeKind
	cutDue  int64
}

func newStoresBatch(p Params, sp process.Stores, n int) *storesBatch {
	sx := &storesBatch{sp: sp, view: p.View, due: p.Due, keyTimers: p.KeyTimers, name: p.Name, partition: p.Partition, before: p.View.StreamTime(), now: p.View.Now(), at: make([]int64, n)}
	sx.nowMs = sx.now.UnixMilli()
	for i := range sx.at {
		sx.at[i] = math.MinInt64
	}
	return sx
}

// seen records that ordered record i, r, runs (r may be its policy's
// substitute). A record the policy drops before its transform (one that
// does not decode) is not seen: it does not move the stream time, as a
// record dropped at deserialization does not in Kafka Streams.
func (sx *storesBatch) seen(i int, r *kgo.Record) { sx.at[i] = r.Timestamp.UnixMilli() }

// streamTimes turns the timestamps of the seen records into the stream
// time at every record and at the batch's end.
func (sx *storesBatch) streamTimes() {
	st := sx.before
	for i, t := range sx.at {
		st = max(st, t)
		sx.at[i] = st
	}
	sx.end = st
}

// newBucket returns the part of a new bucket, from a slab: a batch has at
// most a bucket per record, and one per key with due timers.
func (sx *storesBatch) newBucket() *storesBucket {
	if len(sx.slab) == cap(sx.slab) {
		if sp, ok := slabs.Get().(*[]storesBucket); ok {
			sx.slab = (*sp)[:0]
		} else {
			sx.slab = make([]storesBucket, 0, min(max(len(sx.at), 16), 1024))
		}
		sx.slabs = append(sx.slabs, nil)
	}
	sx.slab = append(sx.slab, storesBucket{sx: sx})
	sx.slabs[len(sx.slabs)-1] = sx.slab
	return &sx.slab[len(sx.slab)-1]
}

// slabs holds slabs of batches that ended (release), for newBucket.
var slabs sync.Pool

// release gives the batch's slabs back for later batches: once its
// buckets ran and merged, nothing refers to them. The parts it used are
// cleared (those beyond were cleared by earlier releases), so that a
// pooled slab holds on to no batch's data.
func (sx *storesBatch) release() {
	for _, s := range sx.slabs {
		clear(s)
		s = s[:0]
		slabs.Put(&s)
	}
	sx.slabs, sx.slab = nil, nil
}

// leftBefore reports whether timers of keys without records due before
// t may have been left for later batches (MaxTimers): an event-time cut
// leaves every due wall-clock timer of such keys, a wall-clock cut none
// of the event-time ones.
func (sx *storesBatch) leftBefore(t process.Timer) bool {
	switch {
	case sx.cutKind == 0:
		return false
	case sx.cutKind != t.Kind:
		return sx.cutKind == process.EventTime
	}
	return t.Due >= sx.cutDue
}

// dueBy reports whether t is due by the batch's end: event time by its
// stream time after the last record, wall clock by its Now.
func (sx *storesBatch) dueBy(t process.Timer) bool {
	return (t.Kind == process.EventTime && t.Due <= sx.end) || (t.Kind == process.WallClock && t.Due <= sx.nowMs)
}

// streamBefore is the stream time just before ordered record i.
func (sx *storesBatch) streamBefore(i int) int64 {
	if i == 0 {
		return sx.before
	}
	return sx.at[i-1]
}

// collectDue hands the timers due by the batch's end to the buckets of
// their keys, adding a bucket (after the record buckets, ordered by their
// first due timer) for a key without records. Of the timers of keys
// without records it takes the first limit (see Params.MaxTimers), in due
// order per kind (event time first); more reports that it left some. The
// keys with records get all their due timers: from the walk while it
// covers every due timer, else read per key (keyTimers).
func (sx *storesBatch) collectDue(byKey map[string]*bucket, buckets []*bucket, limit int) (_ []*bucket, more bool, _ error) {
	if !sx.sp.Timers() || sx.due == nil {
		return buckets, false, nil
	}
	if limit == 0 {
		limit = DefaultMaxTimers
	}
	var (
		only  []*bucket
		taken int
	)
	collect := func(t process.Timer) (bool, error) {
		bk := byKey[string(t.Key)]
		if bk == nil || len(bk.x.pos) == 0 {
			if limit > 0 && taken >= limit {
				if !more {
					sx.cutKind, sx.cutDue = t.Kind, t.Due
				}
				more = true
				// The record buckets' timers may come later: read
				// them per key below, or walk on without keyTimers.
				return len(buckets) > 0 && sx.keyTimers == nil, nil
			}
			taken++
		}
		if bk == nil {
			bk = &bucket{key: bytes.Clone(t.Key)}
			bk.x = sx.newBucket()
			bk.x.first = t.Due
			byKey[string(t.Key)] = bk
			only = append(only, bk)
		}
		t.Key = bk.key
		x := bk.x
		x.due = append(x.due, t)
		x.first = min(x.first, t.Due)
		return true, nil
	}
	if err := sx.due(process.EventTime, sx.end, collect); err != nil {
		return nil, false, fmt.Errorf("%s: reading due timers: %w", sx.name, err)
	}
	if err := sx.due(process.WallClock, sx.nowMs, collect); err != nil {
		return nil, false, fmt.Errorf("%s: reading due timers: %w", sx.name, err)
	}
	if more && sx.keyTimers != nil {
		for _, bk := range buckets {
			x := bk.x
			x.due = x.due[:0]
			err := sx.keyTimers(bk.key, func(t process.Timer) error {
				if sx.dueBy(t) {
					t.Key = bk.key
					x.due = append(x.due, t)
				}
				return nil
			})
			if err != nil {
				return nil, false, fmt.Errorf("%s: reading the timers of key %q: %w", sx.name, bk.key, err)
			}
		}
	}
	for _, bk := range only {
		bk.x.only = true
	}
	slices.SortStableFunc(only, func(a, b *bucket) int {
		if c := cmp.Compare(a.x.first, b.x.first); c != 0 {
			return c
		}
		return bytes.Compare(a.key, b.key)
	})
	return append(buckets, only...), more, nil
}

// merge adds the buckets' store writes and timer operations to res, the
// last per store and key (per key and name) winning, in bucket order.
//
// A store key's expiry (StoreTTL) loses to a write of that store key by
// another bucket, whatever their order: the expiry is void (its delete,
// its timer cancel and its report in FiredTimers are dropped), so the
// write and its re-arming stand. A key that keeps being written never
// expires.
func (sx *storesBatch) merge(res *Result, buckets []*bucket) {
	type wkey struct {
		store int
		key   string
	}
	var writers map[wkey][]*bucket
	for _, bk := range buckets {
		x := bk.x
		if len(x.writes) == 0 {
			continue
		}
		if writers == nil {
			writers = make(map[wkey][]*bucket)
		}
		for _, w := range x.writes {
			k := wkey{w.Store, string(w.Key)}
			if ws := writers[k]; len(ws) == 0 || ws[len(ws)-1] != bk {
				writers[k] = append(ws, bk)
			}
		}
	}
	// Void expiries first, then the last write and timer operation of
	// each, walking the buckets and their lists backwards.
	voids := make([]voided, len(buckets))
	for b, bk := range buckets {
		x := bk.x
		v := &voids[b]
		for _, ex := range x.expiries {
			lost := false
			for _, w := range x.writes[ex.w:ex.wEnd] {
				for _, o := range writers[wkey{w.Store, string(w.Key)}] {
					lost = lost || o != bk
				}
			}
			if !lost {
				continue
			}
			if v.w == nil {
				v.w, v.t, v.f = map[int]bool{}, map[int]bool{}, map[int]bool{}
			}
			for i := ex.w; i < ex.wEnd; i++ {
				v.w[i] = true
			}
			v.t[ex.cancel], v.f[ex.fired] = true, true
		}
		res.Fired += x.fired - len(v.f)
		for i, t := range x.firedTimers {
			if !v.f[i] {
				res.FiredTimers = append(res.FiredTimers, t)
			}
		}
	}
	var seenW map[wkey]struct{}
	type tkey struct{ key, name string }
	var seenT map[tkey]struct{}
	// Without operations on other keys' timers, the buckets' timers
	// differ (a bucket per key): they dedupe per bucket, by name.
	foreign, ntimers := false, 0
	for _, bk := range buckets {
		foreign = foreign || bk.x.foreign
		ntimers += len(bk.x.timers)
	}
	res.Timers = slices.Grow(res.Timers, ntimers)
	for b := len(buckets) - 1; b >= 0; b-- {
		x, v := buckets[b].x, &voids[b]
		for i := len(x.writes) - 1; i >= 0; i-- {
			if v.w[i] {
				continue
			}
			k := wkey{x.writes[i].Store, string(x.writes[i].Key)}
			if _, ok := seenW[k]; ok {
				continue
			}
			if seenW == nil {
				seenW = make(map[wkey]struct{})
			}
			seenW[k] = struct{}{}
			res.StoreWrites = append(res.StoreWrites, x.writes[i])
		}
		from := len(res.Timers)
		for i := len(x.timers) - 1; i >= 0; i-- {
			if v.t[i] {
				continue
			}
			if !foreign && len(x.timers) <= ownScan {
				if !slices.ContainsFunc(res.Timers[from:], func(t process.TimerOp) bool { return t.Name == x.timers[i].Name }) {
					res.Timers = append(res.Timers, x.timers[i])
				}
				continue
			}
			k := tkey{string(x.timers[i].Key), x.timers[i].Name}
			if _, ok := seenT[k]; ok {
				continue
			}
			if seenT == nil {
				seenT = make(map[tkey]struct{})
			}
			seenT[k] = struct{}{}
			res.Timers = append(res.Timers, x.timers[i])
		}
	}
	slices.Reverse(res.StoreWrites)
	slices.Reverse(res.Timers)
}

// voided are the indices of a bucket's writes, timer operations and
// fired timers of expiries that lost (see merge); nil maps: none.
type voided struct {
	w, t, f map[int]bool
}

// storesBucket is a bucket's part of a batch of a process.Stores
// processor.
type storesBucket struct {
	sx *storesBatch
	// pos are the positions of the bucket's records in the batch's order;
	// pos1 backs the first.
	pos  []int
	pos1 [1]int
	// due are the timers of the key due by the batch's end, as Params.Due
	// gave them; first is the earliest Due (of a bucket without records).
	due   []process.Timer
	first int64
	// pending are the key's timers that may fire in this batch (due by
	// its end), by name, nil while none; fired the names that fired.
	pending     map[string]process.Timer
	fired       int
	firedTimers []process.Timer
	done        map[string]struct{}
	// expiries are the store-TTL expiries that fired, which lose to a
	// write of their store key by another bucket (see merge).
	expiries []expiry
	// writes and timers are the bucket's store writes and timer
	// operations in call order; over the last write per store and key,
	// which the bucket's later calls read; timers1 backs the first timer
	// operation (a state TTL's hint, most often the only one).
	writes  []process.StoreWrite
	timers  []process.TimerOp
	timers1 [1]process.TimerOp
	over    map[overKey]overVal
	// fixed: the operations before it are not replaced (putOwn), as
	// expiries refer to them by index. foreign: timers holds operations
	// on timers of other keys.
	fixed   int
	foreign bool
	// stream is the stream time of the running call.
	stream int64
	// cs is the view of the running call (a bucket's calls run one at a
	// time).
	cs callState
	// open is the key's stamp when the bucket began, encoded, when it is
	// recent (openOK; Stamped.Recent).
	open   []byte
	openOK bool
	// only: a bucket of a key without records, whose timers MaxTimers
	// may have cut (leftBefore).
	only bool
	// stamp0 is the stamp of the key's state when the bucket began, read
	// with it (stamp0Read; Params.StampedState). A call may change its
	// Timers in place (process.State.Stamp), never its Kind and At; open
	// keeps its bytes.
	stamp0               process.Stamp
	stamp0OK, stamp0Read bool
	stamp0buf            [1]process.Timer
}

type overKey struct {
	store int
	key   string
}

// storeTTLTimer prefixes the name of a store key's expiry timer
// ("\x00ttl:" + store name, package transformer); ttlTimer is the name
// of a state's expiry timer.
const (
	storeTTLTimer = "\x00ttl:"
	ttlTimer      = "\x00ttl"
)

// rearms reports whether ops set timer name of key.
func rearms(ops []process.TimerOp, key []byte, name string) bool {
	return slices.ContainsFunc(ops, func(op process.TimerOp) bool {
		return !op.Cancel && op.Name == name && bytes.Equal(op.Key, key)
	})
}

// expiry is a fired store-TTL expiry of a bucket: the indices of its
// fired timer, its timer cancel and its writes (from w to wEnd) in the
// bucket's lists.
type expiry struct {
	fired, cancel, w, wEnd int
}

type overVal struct {
	value []byte
	del   bool
}

// runStoresBucket runs a bucket of a process.Stores processor: before
// each of its records, the key's timers due at the stream time before
// that record (or at the batch's Now, for wall-clock ones) fire; after
// the last record, those due at the batch's end.
func runStoresBucket(ctx context.Context, p *Params, bk *bucket, stateful bool) {
	x := bk.x
	if len(x.due) > 0 {
		x.pending = make(map[string]process.Timer, len(x.due))
		for _, t := range x.due {
			// A committed timer and a hint of the open transaction
			// (process.TimerOp.Hint) may both be due: the earlier
			// fires.
			if p, ok := x.pending[t.Name]; !ok || t.Due < p.Due {
				x.pending[t.Name] = t
			}
		}
	}
	var (
		cur   []byte
		found bool
	)
	if stateful {
		var err error
		if p.StampedState != nil {
			var s Stamped
			s, err = p.StampedState(bk.key)
			cur, found = s.Value, s.Found
			x.stamp0, x.stamp0OK = stamp.DecodeInto(s.Stamp, x.stamp0buf[:])
			x.stamp0Read = err == nil
			x.open, x.openOK = s.Stamp, s.Recent && s.Stamp != nil
		} else {
			cur, found, err = p.State(bk.key)
		}
		if err != nil {
			bk.err = fmt.Errorf("%s: %w", p.Name, err)
			return
		}
	}
	existed := found
	for i := range bk.recs {
		if !x.fire(ctx, p, bk, x.sx.streamBefore(x.pos[i]), &cur, &found, stateful) {
			return
		}
		x.stream = x.sx.at[x.pos[i]]
		if p.Tracer == nil {
			if !runRecord(ctx, *p, bk, i, &cur, &found, stateful) {
				return
			}
			continue
		}
		rctx, span := p.Tracer.Record(ctx, bk.recs[i], p.Partition)
		n := len(bk.outs)
		ok := runRecord(rctx, *p, bk, i, &cur, &found, stateful)
		p.Tracer.Inject(rctx, bk.outs[n:])
		if bk.spans == nil {
			bk.spans = new([]oteltrace.SpanContext)
		}
		*bk.spans = append(*bk.spans, span.SpanContext())
		tracing.End(span, bk.err)
		if !ok {
			return
		}
	}
	if !x.fire(ctx, p, bk, x.sx.end, &cur, &found, stateful) {
		return
	}
	if bk.op == stage.Delete && !existed {
		bk.op = stage.Keep
	}
	if stateful && bk.op == stage.Put && !x.openOK {
		// The key's last stamp was not written by this run's recent
		// transactions: the timers it carries may have no timer (a run
		// that could not read the stamp dropped them). Hint them where
		// the new stamp has them, which makes it a stamp the next
		// batches can trust (Stamped.Recent).
		for _, ct := range bk.stamp.Timers {
			if !x.hasOp(bk.key, ct.Name) {
				x.putOwn(process.TimerOp{Timer: process.Timer{Key: bk.key, Name: ct.Name, Kind: ct.Kind, Due: ct.Due}, Hint: true})
			}
		}
	}
}

// fire fires the key's pending timers due at stream time st (event time)
// or at the batch's Now (wall clock), in (Due, Name) order, each at most
// once per batch; a timer a callback sets that is due by then fires after
// it. It reports false when a callback failed (bk.err is set).
func (x *storesBucket) fire(ctx context.Context, p *Params, bk *bucket, st int64, cur *[]byte, found *bool, stateful bool) bool {
	for {
		var (
			t  process.Timer
			ok bool
		)
		for _, c := range x.pending {
			if _, fired := x.done[c.Name]; fired {
				continue
			}
			if due := (c.Kind == process.EventTime && c.Due <= st) || (c.Kind == process.WallClock && c.Due <= x.sx.nowMs); !due {
				continue
			}
			if !ok || c.Due < t.Due || (c.Due == t.Due && c.Name < t.Name) {
				t, ok = c, true
			}
		}
		if !ok {
			return true
		}
		delete(x.pending, t.Name)
		if x.done == nil {
			x.done = make(map[string]struct{})
		}
		x.done[t.Name] = struct{}{}
		x.fired++
		ex := expiry{fired: len(x.firedTimers), cancel: len(x.timers), w: len(x.writes)}
		x.firedTimers = append(x.firedTimers, process.Timer{Key: bk.key, Name: t.Name, Kind: t.Kind, Due: t.Due})
		x.timers = append(x.timers, process.TimerOp{Timer: process.Timer{Key: bk.key, Name: t.Name, Kind: t.Kind, Due: t.Due}, Cancel: true})
		x.fixed = len(x.timers)
		x.stream = st
		res, err := fireTimer(ctx, x.sx.sp, t, *cur, *found, x.view(bk, *cur, *found))
		if err == nil {
			err = checkTimerOps(res.Timers)
		}
		if err != nil {
			bk.err = &transformer.TimerError{Partition: p.Partition, Key: bk.key, Name: t.Name, Due: time.UnixMilli(t.Due), Err: err}
			return false
		}
		if res.Moved || t.Name == ttlTimer && rearms(res.Timers, bk.key, t.Name) {
			// A state TTL's hint that found the key written since
			// moved on to its expiry, or a timer whose key's stamp
			// carries it due later moved there (process.Result.Moved):
			// nothing expired, nothing fired.
			// The expiry may fire in this batch, in due order (now,
			// if due, or before a later record of the key), unless
			// MaxTimers left timers of keys without records due
			// before it for later batches.
			x.firedTimers = x.firedTimers[:len(x.firedTimers)-1]
			x.fired--
			if op := res.Timers[len(res.Timers)-1]; !x.only || !x.sx.leftBefore(op.Timer) {
				delete(x.done, t.Name)
			}
		}
		stamp := time.UnixMilli(t.Due)
		if t.Kind == process.WallClock {
			stamp = x.sx.now
		}
		for _, o := range res.Outputs {
			if o.Timestamp.IsZero() {
				o.Timestamp = stamp
			}
		}
		bk.outs = append(bk.outs, res.Outputs...)
		x.apply(bk, res)
		if strings.HasPrefix(t.Name, storeTTLTimer) {
			ex.wEnd = len(x.writes)
			x.expiries = append(x.expiries, ex)
		}
		if !stateful {
			continue
		}
		switch res.Op {
		case stage.Put:
			*cur, *found = res.State, true
			bk.op, bk.state, bk.stamp = stage.Put, res.State, res.Stamp
		case stage.Delete:
			*cur, *found = nil, false
			bk.op, bk.state, bk.stamp = stage.Delete, nil, process.Stamp{}
		}
	}
}

// process runs a record's ProcessState and takes its store writes and
// timer operations.
func (x *storesBucket) process(ctx context.Context, bk *bucket, in stage.Input, cur []byte, found bool) (res stage.Result, err error) {
	func() {
		defer func() {
			if v := recover(); v != nil {
				err = flechtwerk.Recovered(v)
			}
		}()
		res, err = x.sx.sp.ProcessState(ctx, in, cur, found, x.view(bk, cur, found))
	}()
	if err == nil {
		err = checkTimerOps(res.Timers)
	}
	if err == nil {
		x.apply(bk, res)
	}
	return res, err
}

// checkTimerOps refuses a timer operation the timer store cannot hold:
// an empty state key or name, or (for a set) a clock other than
// EventTime and WallClock.
func checkTimerOps(ops []process.TimerOp) error {
	for _, op := range ops {
		switch {
		case len(op.Key) == 0 || op.Name == "":
			return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "TimerOp",
				"timer %q of state key %q: a timer needs a non-empty state key and name", op.Name, op.Key)
		case !op.Cancel && op.Kind != process.EventTime && op.Kind != process.WallClock:
			return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "TimerOp.Kind",
				"timer %q of state key %q: clock %d is neither EventTime nor WallClock", op.Name, op.Key, op.Kind)
		}
	}
	return nil
}

// fireTimer calls the processor's Fire, recovering a panic.
func fireTimer(ctx context.Context, sp process.Stores, t process.Timer, state []byte, found bool, st process.State) (res stage.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return sp.Fire(ctx, t, state, found, st)
}

// apply takes a call's store writes and timer operations: the bucket's
// later calls read the writes, and its own key's timers become pending
// (a set) or not (a cancel). Timers of other keys fire in a later batch.
func (x *storesBucket) apply(bk *bucket, res stage.Result) {
	for _, w := range res.Writes {
		if x.over == nil {
			x.over = make(map[overKey]overVal)
		}
		// StoreWrite.Store indexes the named stores; State's store
		// argument counts the default store first.
		x.over[overKey{w.Store + 1, string(w.Key)}] = overVal{value: w.Value, del: w.Delete}
		x.writes = append(x.writes, w)
	}
	for _, op := range res.Timers {
		if !bytes.Equal(op.Key, bk.key) {
			x.foreign = true
			x.timers = append(x.timers, op)
			continue
		}
		if op.Hint && x.hinted(bk.key, op) {
			continue
		}
		op = x.putOwn(op)
		// MaxTimers left timers of keys without records due before
		// it for later batches: so it is too.
		left := x.only && !op.Cancel && x.sx.leftBefore(op.Timer)
		if op.Hint {
			// A hint leaves an earlier due time as it is.
			if p, ok := x.pending[op.Name]; !left && x.sx.dueBy(op.Timer) && (!ok || op.Due < p.Due) {
				if x.pending == nil {
					x.pending = make(map[string]process.Timer)
				}
				x.pending[op.Name] = op.Timer
			}
			continue
		}
		if op.Cancel || !x.sx.dueBy(op.Timer) || left {
			delete(x.pending, op.Name) // nil: a no-op
			continue
		}
		if x.pending == nil {
			x.pending = make(map[string]process.Timer)
		}
		x.pending[op.Name] = op.Timer
	}
}

// hinted reports whether hint h of the bucket's key changes nothing, as
// the key's state was last written (Stamped.Recent) with a stamp that
// set the timer no later, and the bucket has no operation on the timer
// yet:
//   - a state TTL's hint, when the stamp is of h's clock and no later
//     than now by it: that write set the expiry no later (its hint or a
//     set, which combine with h into themselves; a cancel comes with a
//     delete of the state);
//   - a carried timer's hint (process.Stamp.Timers), when the stamp
//     carries it of h's clock due no later: that write hinted it there,
//     and a fire or cancel since would have written the state again.
func (x *storesBucket) hinted(key []byte, h process.TimerOp) bool {
	if !x.openOK {
		return false
	}
	if h.Name == ttlTimer {
		// The recent write set the expiry no later than h only when it
		// was stamped no later than now by h's clock (a wall clock may
		// step back; a previous owner's may run ahead).
		now := x.stream
		if h.Kind == process.WallClock {
			now = x.sx.nowMs
		}
		if x.stamp0.Kind != h.Kind || x.stamp0.At > now {
			return false
		}
	} else if t, ok := stamp.TimerOf(x.open, h.Name); !ok || t.Kind != h.Kind || t.Due > h.Due {
		return false
	}
	return !x.hasOp(key, h.Name)
}

// hasOp reports whether the bucket has an operation on timer name of key.
func (x *storesBucket) hasOp(key []byte, name string) bool {
	return slices.ContainsFunc(x.timers, func(t process.TimerOp) bool { return t.Name == name && bytes.Equal(t.Key, key) })
}

// putOwn adds op, an operation on a timer of the bucket's key, to its
// timer operations. It replaces the latest operation on the same timer
// among the last ownScan ones after fixed (a timer re-armed by every
// record has one), else appends: merge keeps the last per timer either
// way.
//
// A hint (process.TimerOp.Hint) after another operation on its timer
// becomes the set that both leave: the earlier due time of a set or hint
// of the same kind, its own after a cancel. putOwn returns the operation
// it recorded.
func (x *storesBucket) putOwn(op process.TimerOp) process.TimerOp {
	if op.Hint {
		for i := len(x.timers) - 1; i >= 0; i-- {
			if t := x.timers[i]; t.Name == op.Name && bytes.Equal(t.Key, op.Key) {
				op = CombineHint(t, op)
				break
			}
		}
	}
	for i := len(x.timers) - 1; i >= max(x.fixed, len(x.timers)-ownScan); i-- {
		if t := &x.timers[i]; t.Name == op.Name && bytes.Equal(t.Key, op.Key) {
			*t = op
			return op
		}
	}
	x.timers = append(x.timers, op)
	return op
}

// CombineHint returns what hint h (process.TimerOp.Hint) leaves after
// prev, an earlier operation on the same timer: prev when it is a set or
// hint of the kind of h due no later; h's due time in prev's place when
// prev is due later; h as a set after a cancel or a set of another kind.
func CombineHint(prev, h process.TimerOp) process.TimerOp {
	switch {
	case prev.Cancel || prev.Kind != h.Kind:
		h.Hint = false
		return h
	case prev.Due <= h.Due:
		return prev
	default:
		prev.Due = h.Due
		return prev
	}
}

// ownScan bounds the operations putOwn looks through.
const ownScan = 8

// view is the process.State of a call of the bucket: Params.View under
// the bucket's own writes, its key's default state being cur.
func (x *storesBucket) view(bk *bucket, cur []byte, found bool) process.State {
	x.cs = callState{x: x, bk: bk, key: bk.key, cur: cur, found: found, stream: x.stream}
	return &x.cs
}

type callState struct {
	x      *storesBucket
	bk     *bucket
	key    []byte
	cur    []byte
	found  bool
	stream int64
}

// Stamp reads the bucket's own key's stamp from the bucket's last write
// of its state, else from the view.
func (c *callState) Stamp(key []byte) (process.Stamp, bool, error) {
	if bytes.Equal(key, c.key) {
		switch c.bk.op {
		case stage.Put:
			return c.bk.stamp, !c.bk.stamp.IsZero(), nil
		case stage.Delete:
			return process.Stamp{}, false, nil
		}
		if c.x.stamp0Read {
			return c.x.stamp0, c.x.stamp0OK, nil
		}
	}
	return c.x.sx.view.Stamp(key)
}

func (c *callState) Get(store int, key []byte) ([]byte, bool, error) {
	if store == process.DefaultStore {
		if bytes.Equal(key, c.key) {
			return c.cur, c.found, nil
		}
	} else if v, ok := c.x.over[overKey{store, string(key)}]; ok {
		if v.del {
			return nil, false, nil
		}
		return v.value, true, nil
	}
	return c.x.sx.view.Get(store, key)
}

type overEntry struct {
	key   []byte
	value []byte
	del   bool
}

func (c *callState) Scan(store int, lo, hi []byte, fn func(key, value []byte) (bool, error)) error {
	var ov []overEntry
	in := func(k []byte) bool { return bytes.Compare(k, lo) >= 0 && (hi == nil || bytes.Compare(k, hi) < 0) }
	if store == process.DefaultStore {
		if in(c.key) {
			ov = append(ov, overEntry{key: c.key, value: c.cur, del: !c.found})
		}
	} else {
		for k, v := range c.x.over {
			if k.store == store && in([]byte(k.key)) {
				ov = append(ov, overEntry{key: []byte(k.key), value: v.value, del: v.del})
			}
		}
		sort.Slice(ov, func(i, j int) bool { return bytes.Compare(ov[i].key, ov[j].key) < 0 })
	}
	if len(ov) == 0 {
		return c.x.sx.view.Scan(store, lo, hi, fn)
	}
	i, stop := 0, false
	emit := func(k, v []byte) (bool, error) {
		more, err := fn(k, v)
		if !more || err != nil {
			stop = true
		}
		return more, err
	}
	err := c.x.sx.view.Scan(store, lo, hi, func(k, v []byte) (bool, error) {
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

func (c *callState) StreamTime() int64 { return c.stream }

func (c *callState) Now() time.Time { return c.x.sx.now }
