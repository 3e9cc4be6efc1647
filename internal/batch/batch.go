package batch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/internal/tracing"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Params is what one run of a batch needs besides its records.
type Params struct {
	// Transformer is the stage that runs.
	Transformer stage.Transformer
	// Partition is the partition every record must be of.
	Partition int32
	// TopicOrder ranks the input topics: records run in this order, then
	// offset order. A topic it does not hold ranks first.
	TopicOrder map[string]int
	// State reads the committed state of a key (a stateful transformer
	// only): its value, whether there is one, and an error that ends the
	// batch. It is called once per bucket, concurrently across buckets; the
	// value must be the caller's own copy.
	State func(key []byte) ([]byte, bool, error)
	// StampedState, when set, is State that also returns the stamp kept
	// with the value, which a Stores processor's bucket then reads once
	// with its state (process.State.Stamp).
	StampedState func(key []byte) (Stamped, error)
	// Sem bounds how many buckets run at the same time: one slot each.
	Sem chan struct{}
	// Name prefixes errors that name no record, e.g. "task 3".
	Name string
	// Policy decides what becomes of invalid records (and counts them);
	// nil is Crash.
	Policy *Policy
	// Tracer, when not nil, gives every record that runs a span (a child
	// of the trace context of its headers, its ctx the transform's) and
	// injects that span's context into the record's outputs. Nil is
	// tracing off: no header is read and no span made.
	Tracer *tracing.Tracer
	// View is what the calls of a process.Stores processor read, for any
	// key and store of the task: the state committed and written by the
	// open transaction before the batch began. Its StreamTime is the
	// task's stream time before the batch and its Now the batch's
	// wall-clock time. Required for a process.Stores processor; a plain
	// Processor never reads it. Its Get and Scan are called concurrently
	// from the buckets; nothing else writes the state while Run runs.
	View process.State
	// Due calls fn for the timers of kind whose Due <= upTo, committed or
	// written by the open transaction, ascending by (Due, Key, Name),
	// until fn returns false or an error. Nil: no timer fires. Run calls
	// it twice (EventTime up to the stream time after the batch,
	// WallClock up to View.Now) before any bucket runs.
	Due func(kind process.TimeKind, upTo int64, fn func(t process.Timer) (bool, error)) error
	// MaxTimers bounds how many due timers of keys without records in
	// the batch it fires (0: DefaultMaxTimers; negative: no bound), so
	// that a backlog of due timers (after downtime, or a jump of the
	// clock or of stream time) cannot grow a transaction past its
	// timeouts. The keys of the batch's records keep all their due
	// timers, so their firing stays interleaved with their records. The
	// timers left over, the latest due, fire in later batches; the
	// Result says so (MoreDue). Due stops reading at the bound; when it
	// stopped, the due timers of each key with records are read with
	// KeyTimers (without KeyTimers, Due reads on through every due timer
	// in a batch with records).
	MaxTimers int
	// KeyTimers calls fn for every timer of key, committed or set by the
	// open transaction (the open transaction's operations replacing the
	// committed ones), in any order. Optional. Run calls it, one call at
	// a time, before any bucket runs.
	KeyTimers func(key []byte, fn func(t process.Timer) error) error
	// sx is the batch's stores and timers, set by Run for a
	// process.Stores processor (nil: a plain Processor, run without any
	// of it).
	sx *storesBatch
}

// Stamped is a key's state read with its stamp (Params.StampedState).
type Stamped struct {
	// Value is the caller's own copy; Found says whether there is one.
	Value []byte
	Found bool
	// Stamp is the stamp kept with the value, encoded (nil: none). Its
	// bytes must not change.
	Stamp []byte
	// Recent: the open transaction wrote the state before the batch or,
	// when it did not, the transaction committed just before it did.
	// Every write of a stamped state sets the state TTL's timer no later
	// than its expiry, and the timers the stamp carries no later than
	// their due times (hints), so a hint of such a timer that a recent
	// stamp has no earlier changes nothing (for the TTL: a recent stamp
	// no later than now by its clock, which may have stepped back). An
	// older stamp is not trusted so, as a run of the stage that could
	// not read it may have fired its timers: a bucket passes its hints
	// on, and hints the timers that its key's new stamp carries over from
	// it.
	Recent bool
}

// DefaultMaxTimers is Params.MaxTimers when it is 0.
const DefaultMaxTimers = 10000

// Result is a processed, not yet committed, batch.
type Result struct {
	// Outputs in commit order: by state key in order of the key's first
	// record, then in emit order.
	Outputs []*kgo.Record
	// Writes hold the last state write per key, in the order of Outputs.
	// A key that had no state when the batch began (Params.State found
	// none) and has none at its end gets no write: deleting absent state
	// writes no tombstone.
	Writes []store.Write
	// Offsets are the next offsets to consume per input topic (control
	// records included).
	Offsets map[string]int64
	// Records is how many input records (not control records) it held.
	Records int
	// Skipped, Substituted and DeadLettered count the records the
	// invalid-record policy handled (also added to the Policy's counts).
	Skipped, Substituted, DeadLettered int
	// Spans are the span contexts of the records that ran, in the order
	// of Outputs; nil without Params.Tracer. (A pointer: the Result of a
	// run without tracing is not one byte larger.)
	Spans *[]oteltrace.SpanContext

	// The fields below are set for a process.Stores processor only.

	// StoreWrites hold the last write per named store and key, in the
	// order of those last writes (bucket order, then call order).
	StoreWrites []process.StoreWrite
	// Timers hold the last timer operation per timer (state key and
	// name), in the order of those last operations. A timer that fired
	// is cancelled unless a later call set it again.
	Timers []process.TimerOp
	// StreamTime is the task's stream time after the batch: the largest
	// of the stream time before it (Params.View) and the timestamps of
	// its input records.
	StreamTime int64
	// Fired is how many timers fired; FiredTimers are they, in bucket
	// order, then firing order.
	Fired       int
	FiredTimers []process.Timer
	// MoreDue reports that timers due by the batch's end were left for
	// later batches (Params.MaxTimers): the caller should run another
	// batch (a tick) at once rather than wait for its next timer check.
	MoreDue bool
}

// bucket is the records of one state key.
type bucket struct {
	key  []byte
	recs []*kgo.Record
	in   []stage.Input
	outs []*kgo.Record
	// final state of the key, and the stamp of its last put
	op    stage.Op
	state []byte
	stamp process.Stamp
	err   error
	// records handled by the invalid-record policy
	n counts
	// span contexts of the bucket's records; nil without Params.Tracer
	// (a pointer: a bucket without tracing is not one byte larger)
	spans *[]oteltrace.SpanContext
	// x is the bucket's part of a batch of a process.Stores processor;
	// nil for other processors.
	x *storesBucket
}

// Run runs the transformer over recs, all of p.Partition. It neither
// produces nor commits. The error of a record is a
// *transformer.ProcessError (a panic of user code is recovered into one
// whose Err is a *flechtwerk.PanicError), or, under the Crash policy, a
// *transformer.InvalidRecordError; the first failing bucket, in bucket
// order, is the one reported.
//
// An invalid record (a value that does not decode, or a transform that
// rejects it with transformer.Invalid or transformer.ErrInvalidRecord) is
// handled by the policy: Skip drops it, DeadLetter adds its dead-letter
// record to Outputs in its bucket's place, Substitute runs it again with
// the hook's value (an invalid substitute ends the batch). Its offset
// counts in Offsets either way.
func Run(ctx context.Context, p Params, recs []*kgo.Record) (*Result, error) {
	res := &Result{Offsets: make(map[string]int64), Records: len(recs)}
	sp, _ := p.Transformer.(process.Stores)
	if sp != nil {
		if p.View == nil {
			return nil, fmt.Errorf("%s: a processor with stores or timers needs Params.View", p.Name)
		}
		res.StreamTime = p.View.StreamTime()
	}
	if len(recs) == 0 && (sp == nil || !sp.Timers() || p.Due == nil) {
		return res, nil
	}
	ordered := slices.Clone(recs)
	slices.SortStableFunc(ordered, func(x, y *kgo.Record) int {
		if c := cmp.Compare(p.TopicOrder[x.Topic], p.TopicOrder[y.Topic]); c != 0 {
			return c
		}
		return cmp.Compare(x.Offset, y.Offset)
	})
	for _, r := range ordered {
		if r.Partition != p.Partition {
			return nil, fmt.Errorf("%s: got record of topic %s partition %d", p.Name, r.Topic, r.Partition)
		}
		if next := r.Offset + 1; next > res.Offsets[r.Topic] {
			res.Offsets[r.Topic] = next
		}
	}
	// Transaction markers of transactional producers upstream take
	// offsets too. They count for the committed offset (or lag would stay
	// at 1 behind every marker) but are not input.
	ordered = slices.DeleteFunc(ordered, func(r *kgo.Record) bool { return r.Attrs.IsControl() })
	res.Records = len(ordered)

	tr := p.Transformer
	if p.Policy == nil {
		p.Policy = &Policy{}
	}
	pol := p.Policy
	stateful := tr.Stateful()
	var sx *storesBatch
	if sp != nil {
		sx = newStoresBatch(p, sp, len(ordered))
		p.sx = sx
	}
	// A stateless stage with stores has a timer store too (it holds the
	// stream time) but sets no timer: its records need no key.
	needKey := stateful
	var (
		buckets []*bucket
		n       counts
		dead    []*kgo.Record // dead letters of records that did not prepare
	)
	byKey := make(map[string]*bucket)
	for i, r := range ordered {
		in, err := prepare(tr, r)
		if err != nil {
			ie, ok := asInvalid(r, err)
			if !ok {
				return nil, recordError(r, err)
			}
			switch pol.Mode {
			case Skip:
				logHandled(pol, ie)
				n.skipped++
				continue
			case DeadLetter:
				logHandled(pol, ie)
				n.dead++
				dead = append(dead, deadLetter(pol, r, ie))
				continue
			case Substitute:
				sub, err := substituted(pol, r, ie)
				if err != nil {
					return nil, err
				}
				if in, err = prepare(tr, sub); err != nil {
					return nil, invalidSubstitute(sub, ie, err)
				}
				logHandled(pol, ie)
				n.substituted++
				r = sub
			default:
				return nil, ie
			}
		}
		if needKey && len(in.Key) == 0 {
			return nil, recordError(r, errors.New("record has an empty state key; a stateful transformer needs one (set transformer.StateKey)"))
		}
		bk := byKey[string(in.Key)]
		if bk == nil {
			bk = &bucket{key: in.Key}
			if sx != nil {
				bk.x = sx.newBucket()
				bk.x.pos, bk.x.timers = bk.x.pos1[:0], bk.x.timers1[:0]
			}
			byKey[string(in.Key)] = bk
			buckets = append(buckets, bk)
		}
		bk.recs = append(bk.recs, r)
		bk.in = append(bk.in, in)
		if sx != nil {
			bk.x.pos = append(bk.x.pos, i)
			sx.seen(i, r)
		}
	}
	if sx != nil {
		sx.streamTimes()
		res.StreamTime = sx.end
		var err error
		if buckets, res.MoreDue, err = sx.collectDue(byKey, buckets, p.MaxTimers); err != nil {
			return nil, err
		}
	}

	if err := runBuckets(ctx, p, buckets, stateful); err != nil {
		return nil, err
	}

	for _, bk := range buckets {
		if bk.err != nil {
			return nil, bk.err
		}
	}
	res.Outputs = append(res.Outputs, dead...)
	// stamps backs the writes' stamps, one allocation for the batch.
	var stamps []byte
	for _, bk := range buckets {
		n.add(bk.n)
		res.Outputs = append(res.Outputs, bk.outs...)
		if bk.spans != nil {
			if res.Spans == nil {
				res.Spans = new([]oteltrace.SpanContext)
			}
			*res.Spans = append(*res.Spans, *bk.spans...)
		}
		if bk.op != stage.Keep && res.Writes == nil {
			res.Writes = make([]store.Write, 0, len(buckets))
		}
		switch bk.op {
		case stage.Put:
			var sb []byte
			if !bk.stamp.IsZero() {
				n := stamp.Len(bk.stamp)
				if cap(stamps)-len(stamps) < n {
					stamps = make([]byte, 0, max(n, stamp.Len(process.Stamp{})*len(buckets)))
				}
				from := len(stamps)
				stamps = stamp.Append(stamps, bk.stamp)
				sb = stamps[from:len(stamps):len(stamps)]
			}
			res.Writes = append(res.Writes, store.Write{Key: bk.key, Value: bk.state, Stamp: sb})
		case stage.Delete:
			res.Writes = append(res.Writes, store.Write{Key: bk.key, Delete: true})
		}
	}
	if sx != nil {
		sx.merge(res, buckets)
		sx.release()
	}
	pol.Skipped.Add(n.skipped)
	pol.Substituted.Add(n.substituted)
	pol.DeadLettered.Add(n.dead)
	res.Skipped, res.Substituted, res.DeadLettered = int(n.skipped), int(n.substituted), int(n.dead)
	return res, nil
}

// runBuckets runs every bucket, at most cap(p.Sem) at a time across all
// the runs that share p.Sem (one slot per running bucket), on at most that
// many goroutines of this run: each claims the next bucket, takes a slot
// and runs it, until none is left. A goroutine per bucket would start every
// bucket on a fresh stack and grow it again in the transform (a JSON
// decode recurses): that copying took about 40% of the CPU of a task with
// many keys per chunk (BenchmarkRunManyKeys). A spent deadline wins over a
// free slot: the buckets not started then do not run, and it returns ctx's
// error once the started ones ended. A transform that ends its goroutine
// without returning (runtime.Goexit, as t.FailNow does) gives its slot back
// and fails the batch.
func runBuckets(ctx context.Context, p Params, buckets []*bucket, stateful bool) error {
	var (
		next, ran atomic.Int64
		wg        sync.WaitGroup
	)
	// The goroutines capture the semaphore, not p: each of them would
	// carry a copy of p.
	sem := p.Sem
	run := func(bk *bucket) {
		defer func() { <-sem }()
		runBucket(ctx, p, bk, stateful)
		ran.Add(1)
	}
	for range min(len(buckets), max(cap(p.Sem), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(buckets) {
					return
				}
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				run(buckets[i])
			}
		}()
	}
	wg.Wait()
	if int(ran.Load()) < len(buckets) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		return fmt.Errorf("%s: a transform ended its goroutine without returning (runtime.Goexit, e.g. t.FailNow in a transform); the batch is not committed", p.Name)
	}
	return nil
}

// runBucket reads the bucket's state once, then threads it through the
// bucket's records, serially.
func runBucket(ctx context.Context, p Params, bk *bucket, stateful bool) {
	if p.sx != nil {
		runStoresBucket(ctx, &p, bk, stateful)
		return
	}
	var (
		cur   []byte
		found bool
	)
	if stateful {
		var err error
		cur, found, err = p.State(bk.key)
		if err != nil {
			bk.err = fmt.Errorf("%s: %w", p.Name, err)
			return
		}
	}
	existed := found
	for i := range bk.recs {
		if p.Tracer == nil {
			if !runRecord(ctx, p, bk, i, &cur, &found, stateful) {
				return
			}
			continue
		}
		rctx, span := p.Tracer.Record(ctx, bk.recs[i], p.Partition)
		n := len(bk.outs)
		ok := runRecord(rctx, p, bk, i, &cur, &found, stateful)
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
	if bk.op == stage.Delete && !existed {
		// The key had no state when the bucket began (neither committed
		// nor written earlier in the open transaction): deleting it
		// changes nothing, and the changelog gets no tombstone.
		bk.op = stage.Keep
	}
}

// runRecord runs the bucket's record i on the state cur (found), adds its
// outputs to the bucket and moves cur and found to its state. It reports
// false when the record ended the bucket (bk.err is set).
func runRecord(ctx context.Context, p Params, bk *bucket, i int, cur *[]byte, found *bool, stateful bool) bool {
	r, pol := bk.recs[i], p.Policy
	var (
		res stage.Result
		err error
	)
	if p.sx == nil {
		res, err = processRecord(ctx, p.Transformer, bk.in[i], *cur, *found)
	} else {
		res, err = bk.x.process(ctx, bk, bk.in[i], *cur, *found)
	}
	if err != nil {
		ie, ok := asInvalid(r, err)
		if !ok {
			bk.err = recordError(r, err)
			return false
		}
		switch pol.Mode {
		case Skip:
			logHandled(pol, ie)
			bk.n.skipped++
			return true
		case DeadLetter:
			logHandled(pol, ie)
			bk.n.dead++
			bk.outs = append(bk.outs, deadLetter(pol, r, ie))
			return true
		case Substitute:
			if res, err = substitute(ctx, p, bk, r, ie, *cur, *found); err != nil {
				bk.err = err
				return false
			}
			logHandled(pol, ie)
			bk.n.substituted++
		default:
			bk.err = ie
			return false
		}
	}
	bk.outs = append(bk.outs, res.Outputs...)
	if !stateful {
		return true
	}
	switch res.Op {
	case stage.Put:
		*cur, *found = res.State, true
		bk.op, bk.state, bk.stamp = stage.Put, res.State, res.Stamp
	case stage.Delete:
		*cur, *found = nil, false
		bk.op, bk.state, bk.stamp = stage.Delete, nil, process.Stamp{}
	}
	return true
}

// substitute runs r again with the policy's substitute value, in bucket bk
// (the substitute must keep the record's state key).
func substitute(ctx context.Context, p Params, bk *bucket, r *kgo.Record, ie *transformer.InvalidRecordError, cur []byte, found bool) (stage.Result, error) {
	sub, err := substituted(p.Policy, r, ie)
	if err != nil {
		return stage.Result{}, err
	}
	in, err := prepare(p.Transformer, sub)
	if err != nil {
		return stage.Result{}, invalidSubstitute(sub, ie, err)
	}
	if !bytes.Equal(in.Key, bk.key) {
		return stage.Result{}, fmt.Errorf("%w: policy substitute: the substitute value changes the state key to %q", ie, in.Key)
	}
	var res stage.Result
	if p.sx == nil {
		res, err = processRecord(ctx, p.Transformer, in, cur, found)
	} else {
		res, err = bk.x.process(ctx, bk, in, cur, found)
	}
	if err != nil {
		return stage.Result{}, invalidSubstitute(sub, ie, err)
	}
	return res, nil
}

// invalidSubstitute is the error of a substitute value that failed too.
func invalidSubstitute(sub *kgo.Record, ie *transformer.InvalidRecordError, err error) error {
	if _, ok := asInvalid(sub, err); ok {
		return fmt.Errorf("%w; policy substitute: the substitute value %q is invalid too: %w", ie, sub.Value, err)
	}
	return recordError(sub, err)
}

func recordError(r *kgo.Record, err error) error {
	return &transformer.ProcessError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Err: err}
}

// prepare calls the stage's Prepare (the user's state-key function),
// recovering a panic.
func prepare(tr stage.Transformer, r *kgo.Record) (in stage.Input, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return tr.Prepare(r)
}

// processRecord calls the stage's Process (the user's transform and codec),
// recovering a panic.
func processRecord(ctx context.Context, tr stage.Transformer, in stage.Input, state []byte, found bool) (res stage.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return tr.Process(ctx, in, state, found)
}
