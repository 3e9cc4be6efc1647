package transformer

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// handle ties a *Stage to its engine view (internal/stage); the
// alias keeps the embedded field unexported.
type handle = stage.Handle

// adapter is the engine's view of a *Stage[S].
type adapter[S any] struct{ t *Stage[S] }

func (a adapter[S]) Validate() error { return a.t.Validate() }

func (a adapter[S]) Stateful() bool { return a.t != nil && a.t.stateless == nil }

// Prepare converts r to the user's Record and derives its state key: the
// StateKey option's function, else the record key.
func (a adapter[S]) Prepare(r *kgo.Record) (stage.Input, error) {
	rec := toRecord(r)
	key := rec.Key
	if a.t.stateKey != nil {
		key = a.t.stateKey(rec)
	}
	in := stage.Input{Record: r, Key: key, View: rec}
	if a.t.decode != nil {
		// A value that does not decode is an *InvalidRecordError; the
		// input keeps its key so that a policy can still place it.
		v, err := a.t.decode(rec)
		if err != nil {
			return in, err
		}
		in.View = v
	}
	return in, nil
}

// Process runs the transform for one prepared record and encodes what it
// did.
func (a adapter[S]) Process(ctx context.Context, in stage.Input, state []byte, found bool) (stage.Result, error) {
	t := a.t
	if t.decode != nil {
		return a.processTyped(ctx, in, state, found)
	}
	rec, ok := in.View.(*Record)
	if !ok {
		return stage.Result{}, fmt.Errorf("transformer: internal error: input view is %T, not prepared by this transformer", in.View)
	}
	if t.stateless != nil {
		var out Outputs
		if err := t.stateless.Transform(ctx, rec, &out); err != nil {
			return stage.Result{}, err
		}
		return stage.Result{Outputs: toKgo(out.outs)}, nil
	}
	return a.stateful(in, state, found, func(s S, e *Emitter[S]) error { return t.fn.Transform(ctx, rec, s, e) })
}

// processTyped is Process for a typed transformer: in.View is the record's
// *TypedRecord.
func (a adapter[S]) processTyped(ctx context.Context, in stage.Input, state []byte, found bool) (stage.Result, error) {
	t := a.t
	if t.typedStateless != nil {
		var out Outputs
		if err := t.typedStateless(ctx, in.View, &out); err != nil {
			return stage.Result{}, err
		}
		return stage.Result{Outputs: toKgo(out.outs)}, nil
	}
	return a.stateful(in, state, found, func(s S, e *Emitter[S]) error { return t.typed(ctx, in.View, s, e) })
}

// stateful decodes the state, runs call and encodes what it did.
func (a adapter[S]) stateful(in stage.Input, state []byte, found bool, call func(S, *Emitter[S]) error) (stage.Result, error) {
	t := a.t
	var s S
	if found {
		var err error
		if s, err = t.codec.Decode(state); err != nil {
			return stage.Result{}, fmt.Errorf("transformer: decoding state of key %q: %w", in.Key, err)
		}
	}
	e := Emitter[S]{had: found}
	if err := call(s, &e); err != nil {
		return stage.Result{}, err
	}
	r := stage.Result{Outputs: toKgo(e.outs), Op: e.op}
	if e.op == stage.Put {
		b, err := t.codec.Encode(e.state)
		if err != nil {
			return stage.Result{}, fmt.Errorf("transformer: encoding state of key %q: %w", in.Key, err)
		}
		if b == nil {
			b = []byte{} // nil is a tombstone on the changelog; keep puts distinct
		}
		r.State = b
	}
	return r, nil
}

func toRecord(r *kgo.Record) *Record {
	rec := &Record{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
	}
	if len(r.Headers) > 0 {
		rec.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return rec
}

func toKgo(outs []Output) []*kgo.Record {
	if len(outs) == 0 {
		return nil
	}
	// One allocation for the records and one for all their headers: a
	// record is sent and acknowledged with the others of its call.
	recs := make([]kgo.Record, len(outs))
	nh := 0
	for _, o := range outs {
		nh += len(o.Headers)
	}
	var hs []kgo.RecordHeader
	if nh > 0 {
		hs = make([]kgo.RecordHeader, nh)
	}
	rs := make([]*kgo.Record, len(outs))
	for i, o := range outs {
		// The partitioner sets the partition; -1 until it ran tells a
		// produce error that none was assigned.
		r := &recs[i]
		*r = kgo.Record{Topic: o.Topic, Partition: -1, Key: o.Key, Value: o.Value}
		if len(o.Headers) > 0 {
			r.Headers = hs[:len(o.Headers):len(o.Headers)]
			hs = hs[len(o.Headers):]
			for j, h := range o.Headers {
				r.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
		rs[i] = r
	}
	return rs
}
