package transformer

import (
	"context"
	"errors"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// Header is a Kafka record header (the same type as flechtwerk.Header).
type Header = flechtwerk.Header

// Record is one input record as read (read_committed) from an input topic
// (the same type as flechtwerk.Record and configtopic.Record).
type Record = flechtwerk.Record

// Output is one record to produce inside the task's transaction. It goes to
// the partition chosen by hashing Key with Kafka's default (murmur2)
// partitioner, so outputs are co-partitioned with Java producers.
type Output struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
}

// Outputs collects the output records of one call.
type Outputs struct {
	outs []Output
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

// Func is a stateful transform: called once per record with the current state
// of the record's state key (the zero value when there is none).
type Func[S any] func(ctx context.Context, rec *Record, state S, out *Emitter[S]) error

// StatelessFunc is a transform that keeps no state.
type StatelessFunc func(ctx context.Context, rec *Record, out *Outputs) error

// None is the state type of stateless transformers.
type None struct{}

// Transformer is a transform function with its state codec and state-key
// extraction. Build it with New or Stateless.
type Transformer[S any] struct {
	handle
	fn        Func[S]
	stateless StatelessFunc
	codec     Codec[S]
	stateKey  func(*Record) []byte
	err       error

	// A typed transformer (NewTyped, StatelessTyped): decode makes the
	// typed view of a record, which typed or typedStateless receives.
	decode         func(*Record) (any, error)
	typed          func(ctx context.Context, view any, state S, out *Emitter[S]) error
	typedStateless func(ctx context.Context, view any, out *Outputs) error
}

// Opt configures a Transformer.
type Opt interface{ apply(*cfg) }

type cfg struct {
	codec    any
	input    any
	stateKey func(*Record) []byte
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
// state type; a mismatch is reported by Validate (and so by runner.New) with
// flechtwerk.CodeInvalidTransformer.
func StateCodec[S any](c Codec[S]) Opt {
	return optFunc(func(cf *cfg) { cf.codec = c })
}

// New returns a stateful transformer over state type S whose transform
// sees raw input records (for decoded input values use NewTyped). Every
// problem found (a nil function, a codec of another state type) is
// reported by Validate, joined with errors.Join.
func New[S any](fn Func[S], opts ...Opt) *Transformer[S] {
	t, c := build[S](fn == nil, opts)
	t.fn = fn
	if c.input != nil {
		t.err = errors.Join(t.err, errInputUntyped)
	}
	return t
}

// Stateless returns a transformer that keeps no state and opens no store.
// A StateCodec option has no effect: there is no state to encode.
func Stateless(fn StatelessFunc, opts ...Opt) *Transformer[None] {
	t, c := buildStateless(fn == nil, opts)
	if fn != nil {
		t.stateless = fn
	}
	if c.input != nil {
		t.err = errors.Join(t.err, errInputUntyped)
	}
	return t
}

var errInputUntyped = flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "InputCodec",
	"an input codec needs a typed transformer (NewTyped or StatelessTyped); New and Stateless see raw bytes")

// build applies opts to a stateful transformer without its function.
func build[S any](nilFn bool, opts []Opt) (*Transformer[S], cfg) {
	var c cfg
	for _, o := range opts {
		o.apply(&c)
	}
	t := &Transformer[S]{stateKey: c.stateKey}
	t.handle = stage.NewHandle(adapter[S]{t}, nil)
	var errs []error
	if nilFn {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "Func", "transform function is nil"))
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
	t.err = errors.Join(errs...)
	return t, c
}

// buildStateless applies opts to a stateless transformer without its
// function.
func buildStateless(nilFn bool, opts []Opt) (*Transformer[None], cfg) {
	var c cfg
	for _, o := range opts {
		o.apply(&c)
	}
	// stateless is set (the typed constructor replaces it): it is what
	// makes the transformer stateless.
	t := &Transformer[None]{stateKey: c.stateKey, stateless: func(context.Context, *Record, *Outputs) error { return nil }}
	t.handle = stage.NewHandle(adapter[None]{t}, nil)
	if nilFn {
		t.err = flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "Func", "transform function is nil")
	}
	return t, c
}

// Validate reports every problem found when the transformer was built, as
// *flechtwerk.ConfigError values joined with errors.Join (nil when none).
func (t *Transformer[S]) Validate() error {
	if t == nil {
		return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "transformer", "transformer is nil")
	}
	return t.err
}

// Codec returns the codec that encodes the transformer's state (nil for
// stateless transformers).
func (t *Transformer[S]) Codec() Codec[S] { return t.codec }
