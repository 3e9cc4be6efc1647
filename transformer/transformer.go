package transformer

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// Header is a Kafka record header (the same type as flechtwerk.Header).
type Header = flechtwerk.Header

// Record is one input record as read (read_committed) from an input topic
// (the same type as flechtwerk.Record and configtopic.Record).
type Record = flechtwerk.Record

// Output is one record to produce inside the task's transaction.
//
// The zero values mean what Kafka Streams does: a zero Timestamp is the
// input record's timestamp, and without ToPartition the record goes to
// the partition its topic's partitioner chooses (Partitioner,
// PartitionBy), by default Kafka's default partitioner (Murmur2 of Key),
// so outputs are co-partitioned with Java producers. Headers are the
// record's own; the stage option InputHeaders puts the input record's
// before them.
type Output struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
	// Timestamp is the record's timestamp; the zero time: the input
	// record's.
	Timestamp time.Time

	partition    int32
	hasPartition bool
}

// ToPartition returns o sent to partition p of its topic instead of the
// one its partitioner would choose. A partition the topic does not have
// fails the task's transaction with an *flechtwerk.OutputError
// (flechtwerk.CodeOutputPartition) naming topic and partition: the
// transaction is aborted and Run ends; nothing is skipped.
func (o Output) ToPartition(p int32) Output {
	o.partition, o.hasPartition = p, true
	return o
}

// Partition returns the partition set by ToPartition; ok is false when the
// topic's partitioner chooses it. (The outputs of a transformertest.Driver
// have the partition they went to.)
func (o Output) Partition() (p int32, ok bool) { return o.partition, o.hasPartition }

// Outputs collects the output records of one call.
type Outputs struct {
	outs  []Output
	err   error       // the first failed typed send: fails the call
	decls []*declared // the stage's declarations: typed sends go only through these
	// call is the view and the writes of a call of a stage with stores
	// or timers; nil for the others.
	call *call
	// buf backs outs for the first outputs of a call the runtime makes
	// (most send one or two): no allocation of their own.
	buf [2]Output
}

// Send emits a record to topic, partitioned by key.
func (o *Outputs) Send(topic string, key, value []byte) {
	o.outs = append(o.outs, Output{Topic: topic, Key: key, Value: value})
}

// SendRecord emits a fully specified output record.
func (o *Outputs) SendRecord(out Output) {
	o.outs = append(o.outs, out)
}

// Emitter collects the outputs and the state change of one transform call.
type Emitter[S any] struct {
	Outputs
	op    stage.Op
	state S
	had   bool
}

// SetState sets the state of the record's state key to s. The last call of
// the batch per key is what is written to the changelog and the store.
func (e *Emitter[S]) SetState(s S) {
	e.op = stage.Put
	e.state = s
}

// DeleteState removes the state of the record's state key. It writes a
// tombstone to the changelog only when the key has state to remove: a
// key without state (none committed, none written earlier in the open
// transaction or the batch) gets no changelog write.
func (e *Emitter[S]) DeleteState() {
	e.op = stage.Delete
	var zero S
	e.state = zero
}

// HadState reports whether the key had a state when the call began; when it
// did not, the state argument is the zero value of S.
func (e *Emitter[S]) HadState() bool { return e.had }

// Transformer is what a user implements for a stateful transformer:
// Transform is called once per input record with the current state of the
// record's state key (the zero value of S when there is none; see
// Emitter.HadState) and sends outputs and sets or deletes that state
// through out. Records of one state key are transformed serially, in input
// order; records of different keys may be transformed concurrently, so
// Transform must be safe for concurrent use.
//
// An error ends Run: the task's transaction is aborted and its records are
// delivered again after the restart (no retry, no skip), except an invalid
// record (Invalid, ErrInvalidRecord), which the runner's policy handles. A
// value that also implements flechtwerk.Lifecycle is opened before the
// first record and closed after the last.
//
// Build a stage with From (New for a Func).
type Transformer[S any] interface {
	Transform(ctx context.Context, rec *Record, state S, out *Emitter[S]) error
}

// Func adapts a function to a Transformer, as http.HandlerFunc adapts one
// to an http.Handler.
type Func[S any] func(ctx context.Context, rec *Record, state S, out *Emitter[S]) error

// Transform calls f.
func (f Func[S]) Transform(ctx context.Context, rec *Record, state S, out *Emitter[S]) error {
	return f(ctx, rec, state, out)
}

// StatelessTransformer is what a user implements for a transformer that
// keeps no state: Transform sends the outputs of one record through out.
// The rest of Transformer's contract holds. Build a stage with
// StatelessFrom (Stateless for a StatelessFunc).
type StatelessTransformer interface {
	Transform(ctx context.Context, rec *Record, out *Outputs) error
}

// StatelessFunc adapts a function to a StatelessTransformer.
type StatelessFunc func(ctx context.Context, rec *Record, out *Outputs) error

// Transform calls f.
func (f StatelessFunc) Transform(ctx context.Context, rec *Record, out *Outputs) error {
	return f(ctx, rec, out)
}

// None is the state type of stateless transformers.
type None struct{}

// Stage is a transformer ready to run: the user's Transformer (or
// StatelessTransformer, or a typed one) with its state codec and state-key
// extraction. Build it with From, New, StatelessFrom, Stateless or their
// typed forms; run it with runner.NewTransformer, test it with transformertest.New.
type Stage[S any] struct {
	handle
	fn        Transformer[S]
	stateless StatelessTransformer
	codec     Codec[S]
	stateKey  func(*Record) []byte
	err       error
	out       outputSpec
	input     any // the input codec of a typed transformer

	// A typed transformer (TypedFrom, StatelessTypedFrom): decode makes
	// the typed view of a record, which typed or typedStateless receives.
	decode         func(*Record) (any, error)
	typed          func(ctx context.Context, view any, state S, out *Emitter[S]) error
	typedStateless func(ctx context.Context, view any, out *Outputs) error

	// Stores and timers (nil, nil, nil when the stage uses none).
	sc       *storesCfg
	onTimer  func(ctx context.Context, t Timer, state S, out *Emitter[S]) error
	onExpire func(ctx context.Context, key []byte, state S, out *Outputs) error
}

// Opt configures a transformer stage.
type Opt interface{ apply(*cfg) }

type cfg struct {
	codec        any
	input        any
	stateKey     func(*Record) []byte
	decls        []Declaration
	partitioners map[string]PartitionFunc
	inputHeaders bool

	storesSet         bool
	stores            []StoreDef
	ttl               time.Duration
	ttlKind           TimeKind
	ttlSet            bool
	onTimer, onExpire any
}

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

// StateKey sets the function that derives a record's state key. The default
// is the record key. Records with equal state keys in one partition share
// state and run serially; the key must not be empty for stateful
// transformers (an empty key is an error naming the record).
func StateKey(fn func(*Record) []byte) Opt {
	return optFunc(func(c *cfg) { c.stateKey = fn })
}

// StateCodec sets the codec that encodes the state in the store and
// changelog. The default is JSON. The codec's type must be the transformer's
// state type; a mismatch is reported by Validate (and so by runner.NewTransformer) with
// flechtwerk.CodeInvalidTransformer.
func StateCodec[S any](c Codec[S]) Opt {
	return optFunc(func(cf *cfg) { cf.codec = c })
}

// From returns a stateful transformer stage over state type S whose
// Transform sees raw input records (for decoded input values use
// TypedFrom). Every problem found (a nil Transformer, a codec of another
// state type) is reported by Validate, joined with errors.Join.
func From[S any](tr Transformer[S], opts ...Opt) *Stage[S] {
	t, c := build[S](tr, opts)
	if !isNil(tr) {
		t.fn = tr
	}
	if c.input != nil {
		t.err = errors.Join(t.err, errInputUntyped)
	}
	return t
}

// New returns a stateful transformer stage calling fn: From(fn).
func New[S any](fn Func[S], opts ...Opt) *Stage[S] { return From[S](fn, opts...) }

// StatelessFrom returns a transformer stage that keeps no state and opens
// no store. A StateCodec option has no effect: there is no state to
// encode.
func StatelessFrom(tr StatelessTransformer, opts ...Opt) *Stage[None] {
	t, c := buildStateless(tr, opts)
	if !isNil(tr) {
		t.stateless = tr
	}
	if c.input != nil {
		t.err = errors.Join(t.err, errInputUntyped)
	}
	return t
}

// Stateless returns a stateless transformer stage calling fn:
// StatelessFrom(fn).
func Stateless(fn StatelessFunc, opts ...Opt) *Stage[None] { return StatelessFrom(fn, opts...) }

var errInputUntyped = flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "InputCodec",
	"an input codec needs a typed transformer (TypedFrom, NewTyped, StatelessTypedFrom or StatelessTyped); the others see raw bytes")

// build applies opts to a stateful transformer stage built from impl (the
// user's value), without setting what it calls.
func build[S any](impl any, opts []Opt) (*Stage[S], cfg) {
	var c cfg
	for _, o := range opts {
		o.apply(&c)
	}
	t := &Stage[S]{stateKey: c.stateKey}
	var errs []error
	switch fn := c.onTimer.(type) {
	case nil:
		if tt, ok := impl.(interface {
			OnTimer(ctx context.Context, t Timer, state S, out *Emitter[S]) error
		}); ok {
			t.onTimer = tt.OnTimer
		}
	case func(ctx context.Context, t Timer, state S, out *Emitter[S]) error:
		t.onTimer = fn
	default:
		var zero S
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "OnTimer",
			"callback %T does not take the state type %T", fn, zero))
	}
	switch fn := c.onExpire.(type) {
	case nil:
	case func(ctx context.Context, key []byte, state S, out *Outputs) error:
		t.onExpire = fn
	default:
		var zero S
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "OnExpire",
			"callback %T does not take the state type %T", fn, zero))
	}
	if isNil(impl) {
		errs = append(errs, errNilTransform)
	}
	switch codec := c.codec.(type) {
	case nil:
		t.codec = JSON[S]()
	case Codec[S]:
		t.codec = codec
	default:
		var zero S
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "StateCodec",
			"codec %T does not encode the state type %T", codec, zero))
	}
	errs = append(errs, t.out.build(c))
	sc, err := buildStores(c, c.onTimer != nil || t.onTimer != nil, c.onExpire != nil, false)
	errs = append(errs, err)
	if sc != nil {
		sc.stateCodec = t.codec
		t.sc = sc
		t.handle = stage.NewHandle(storesAdapter[S]{adapter[S]{t}}, impl)
	} else {
		t.handle = stage.NewHandle(adapter[S]{t}, impl)
	}
	t.err = errors.Join(errs...)
	return t, c
}

// buildStateless applies opts to a stateless transformer stage built from
// impl, without setting what it calls.
func buildStateless(impl any, opts []Opt) (*Stage[None], cfg) {
	var c cfg
	for _, o := range opts {
		o.apply(&c)
	}
	// stateless is set (the typed constructor replaces it): it is what
	// makes the transformer stateless.
	t := &Stage[None]{stateKey: c.stateKey, stateless: StatelessFunc(func(context.Context, *Record, *Outputs) error { return nil })}
	if isNil(impl) {
		t.err = errNilTransform
	}
	sc, err := buildStores(c, c.onTimer != nil, c.onExpire != nil, true)
	t.err = errors.Join(t.err, t.out.build(c), err)
	if sc != nil {
		t.sc = sc
		t.handle = stage.NewHandle(storesAdapter[None]{adapter[None]{t}}, impl)
	} else {
		t.handle = stage.NewHandle(adapter[None]{t}, impl)
	}
	return t, c
}

var errNilTransform = flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "Transformer", "the transformer (or transform function) is nil")

// isNil reports whether the user's value is nil: a nil interface or a nil
// function.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Func && rv.IsNil()
}

// Validate reports every problem found when the stage was built, as
// *flechtwerk.ConfigError values joined with errors.Join (nil when none).
func (t *Stage[S]) Validate() error {
	if t == nil {
		return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "transformer", "transformer is nil")
	}
	return t.err
}

// Codec returns the codec that encodes the transformer's state (nil for
// stateless transformers).
func (t *Stage[S]) Codec() Codec[S] { return t.codec }
