package transformer

import (
	"context"
	"errors"
	"fmt"

	"github.com/flechtwerk/flechtwerk"
)

// TypedRecord is an input record whose value was decoded by the
// transformer's input codec (its Serde, in Kafka Streams terms). Value is
// the decoded value; the raw bytes stay available as Record.Value, with
// the key, headers and location.
type TypedRecord[V any] struct {
	Record
	// Value is the record value, decoded by the InputCodec.
	Value V
}

// TypedTransformer is what a user implements for a stateful transformer
// over input values of type V, decoded by the InputCodec option (JSON by
// default). The contract is Transformer's. Build a stage with TypedFrom
// (NewTyped for a TypedFunc).
type TypedTransformer[V, S any] interface {
	Transform(ctx context.Context, rec *TypedRecord[V], state S, out *Emitter[S]) error
}

// TypedFunc adapts a function to a TypedTransformer.
type TypedFunc[V, S any] func(ctx context.Context, rec *TypedRecord[V], state S, out *Emitter[S]) error

// Transform calls f.
func (f TypedFunc[V, S]) Transform(ctx context.Context, rec *TypedRecord[V], state S, out *Emitter[S]) error {
	return f(ctx, rec, state, out)
}

// TypedStatelessTransformer is what a user implements for a stateless
// transformer over input values of type V. The contract is Transformer's.
// Build a stage with StatelessTypedFrom (StatelessTyped for a
// TypedStatelessFunc).
type TypedStatelessTransformer[V any] interface {
	Transform(ctx context.Context, rec *TypedRecord[V], out *Outputs) error
}

// TypedStatelessFunc adapts a function to a TypedStatelessTransformer.
type TypedStatelessFunc[V any] func(ctx context.Context, rec *TypedRecord[V], out *Outputs) error

// Transform calls f.
func (f TypedStatelessFunc[V]) Transform(ctx context.Context, rec *TypedRecord[V], out *Outputs) error {
	return f(ctx, rec, out)
}

// InputCodec sets the codec that decodes the input values of a typed
// transformer (TypedFrom, NewTyped, StatelessTypedFrom, StatelessTyped):
// Kafka Streams' value Serde of
// Consumed.with. The default is JSON. The codec's type must be the
// transformer's input type V, and the option needs a typed transformer; a
// mismatch is reported by Validate with flechtwerk.CodeInvalidTransformer.
//
// A value that does not decode is an invalid record (*InvalidRecordError,
// Part PartValue): the runner's policy decides what becomes of it
// (runner.InvalidRecords; by default Run ends). A nil value (a tombstone)
// is decoded like any other: JSON decodes it to an error, so a topic with
// tombstones wants a codec that accepts them.
func InputCodec[V any](c Codec[V]) Opt {
	return optFunc(func(cf *cfg) { cf.input = c })
}

// TypedFrom returns a stateful transformer stage over input values of
// type V (decoded by the InputCodec option, JSON by default) and state type
// S. The StateKey function, when given, sees the raw record.
func TypedFrom[V, S any](tr TypedTransformer[V, S], opts ...Opt) *Stage[S] {
	t, c := build[S](tr, opts)
	dec, codec, err := inputDecoder[V](c)
	t.err = errors.Join(t.err, err)
	t.input = codec
	if !isNil(tr) {
		t.decode = dec
		t.typed = func(ctx context.Context, view any, s S, e *Emitter[S]) error {
			return tr.Transform(ctx, view.(*TypedRecord[V]), s, e)
		}
	}
	return t
}

// NewTyped returns a typed stateful transformer stage calling fn:
// TypedFrom(fn).
func NewTyped[V, S any](fn TypedFunc[V, S], opts ...Opt) *Stage[S] {
	return TypedFrom[V, S](fn, opts...)
}

// StatelessTypedFrom returns a stateless transformer stage over input
// values of type V (decoded by the InputCodec option, JSON by default).
func StatelessTypedFrom[V any](tr TypedStatelessTransformer[V], opts ...Opt) *Stage[None] {
	t, c := buildStateless(tr, opts)
	dec, codec, err := inputDecoder[V](c)
	t.err = errors.Join(t.err, err)
	t.input = codec
	if !isNil(tr) {
		t.decode = dec
		t.typedStateless = func(ctx context.Context, view any, out *Outputs) error {
			return tr.Transform(ctx, view.(*TypedRecord[V]), out)
		}
	}
	return t
}

// StatelessTyped returns a typed stateless transformer stage calling fn:
// StatelessTypedFrom(fn).
func StatelessTyped[V any](fn TypedStatelessFunc[V], opts ...Opt) *Stage[None] {
	return StatelessTypedFrom[V](fn, opts...)
}

// inputDecoder returns the decoder of the typed view: the InputCodec
// option's codec, else JSON.
func inputDecoder[V any](c cfg) (func(*Record) (any, error), Codec[V], error) {
	var codec Codec[V]
	switch in := c.input.(type) {
	case nil:
		codec = JSON[V]()
	case Codec[V]:
		codec = in
	default:
		var zero V
		return nil, nil, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "InputCodec",
			"codec %T does not decode the input type %T", in, zero)
	}
	return func(rec *Record) (any, error) {
		v, err := codec.Decode(rec.Value)
		switch {
		case errors.Is(err, flechtwerk.ErrUnavailable):
			// Not the record's fault: the task's transaction aborts.
			return nil, fmt.Errorf("transformer: decoding the value of %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		case err != nil:
			return nil, &InvalidRecordError{Part: PartValue, Err: err}
		}
		return &TypedRecord[V]{Record: *rec, Value: v}, nil
	}, codec, nil
}
