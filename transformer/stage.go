package transformer

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/errchain"
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

// Outputs returns the stage's declared output topics.
func (a adapter[S]) Outputs() []stage.OutputSpec { return a.t.out.specs() }

// Partitioners returns the partitioners of the stage's output topics.
func (a adapter[S]) Partitioners() map[string]func(key []byte, partitions int32) int32 {
	return a.t.out.partitioners
}

// ExplicitPartitions reports that the Partition of the stage's outputs
// says where they go: -1 (the partitioner) unless set by ToPartition.
func (a adapter[S]) ExplicitPartitions() bool { return true }

// Codecs returns the codecs the stage encodes with: its state codec
// (stateful stages) and the key and value codecs of its declared outputs,
// each once. The input codec only decodes and is left out: opening it
// could register a consumer's schema on the producer's subject.
func (a adapter[S]) Codecs() []any {
	t := a.t
	var cs []any
	add := func(c any) {
		if c == nil {
			return
		}
		if reflect.TypeOf(c).Comparable() {
			for _, x := range cs {
				if reflect.TypeOf(x) == reflect.TypeOf(c) && x == c {
					return
				}
			}
		}
		cs = append(cs, c)
	}
	if t.stateless == nil && t.codec != nil {
		add(t.codec)
	}
	if t.sc != nil {
		for _, b := range t.sc.stores {
			add(b.codec)
		}
	}
	for _, d := range t.out.decls {
		add(d.codecs[0])
		add(d.codecs[1])
	}
	return cs
}

// Process runs the transform for one prepared record and encodes what it
// did.
func (a adapter[S]) Process(ctx context.Context, in stage.Input, state []byte, found bool) (stage.Result, error) {
	return a.process(ctx, in, state, found, nil, nil)
}

// process is Process in call c (nil: a stage without stores or timers);
// a stateful stage's emitter is e (nil: one of its own).
func (a adapter[S]) process(ctx context.Context, in stage.Input, state []byte, found bool, c *call, e *Emitter[S]) (stage.Result, error) {
	t := a.t
	if t.decode != nil {
		return a.processTyped(ctx, in, state, found, c, e)
	}
	rec, ok := in.View.(*Record)
	if !ok {
		return stage.Result{}, fmt.Errorf("transformer: internal error: input view is %T, not prepared by this transformer", in.View)
	}
	if t.stateless != nil {
		out := Outputs{decls: t.out.decls, call: c}
		out.outs = out.buf[:0]
		if err := t.stateless.Transform(ctx, rec, &out); err != nil {
			return stage.Result{}, out.failed(err)
		}
		return a.result(&out, in.Record, stage.Keep)
	}
	return a.stateful(in, state, found, c, e, func(s S, e *Emitter[S]) error { return t.fn.Transform(ctx, rec, s, e) })
}

// processTyped is Process for a typed transformer: in.View is the record's
// *TypedRecord.
func (a adapter[S]) processTyped(ctx context.Context, in stage.Input, state []byte, found bool, c *call, e *Emitter[S]) (stage.Result, error) {
	t := a.t
	if t.typedStateless != nil {
		out := Outputs{decls: t.out.decls, call: c}
		out.outs = out.buf[:0]
		if err := t.typedStateless(ctx, in.View, &out); err != nil {
			return stage.Result{}, out.failed(err)
		}
		return a.result(&out, in.Record, stage.Keep)
	}
	return a.stateful(in, state, found, c, e, func(s S, e *Emitter[S]) error { return t.typed(ctx, in.View, s, e) })
}

// failed is the error of a call that returned err: its first failed
// typed send, when there is one, wins (a transform that ignored it must
// not turn the call into a skippable invalid record).
func (o *Outputs) failed(err error) error {
	if o.err != nil {
		return o.err
	}
	return err
}

// result is the Result of a call that sent out: its first failed typed
// send fails it.
func (a adapter[S]) result(out *Outputs, in *kgo.Record, op stage.Op) (stage.Result, error) {
	if out.err != nil {
		return stage.Result{}, out.err
	}
	recs, err := toKgo(out.outs, in, a.t.out.inputHeaders)
	if err != nil {
		return stage.Result{}, err
	}
	return stage.Result{Outputs: recs, Op: op}, nil
}

// stateful decodes the state, runs call with emitter e (nil: a new one)
// and encodes what it did.
func (a adapter[S]) stateful(in stage.Input, state []byte, found bool, c *call, e *Emitter[S], call func(S, *Emitter[S]) error) (stage.Result, error) {
	t := a.t
	var s S
	if found {
		var err error
		if s, err = t.codec.Decode(state); err != nil {
			return stage.Result{}, &stateCodecError{op: "decoding", key: in.Key, err: err}
		}
	}
	if e == nil {
		e = new(Emitter[S])
	}
	e.had = found
	e.decls = t.out.decls
	e.call = c
	e.outs = e.buf[:0]
	if err := call(s, e); err != nil {
		return stage.Result{}, e.failed(err)
	}
	r, err := a.result(&e.Outputs, in.Record, e.op)
	if err != nil {
		return r, err
	}
	if e.op == stage.Put {
		b, err := t.codec.Encode(e.state)
		if err != nil {
			return stage.Result{}, &stateCodecError{op: "encoding", key: in.Key, err: err}
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

// toKgo converts the outputs of the call of input in: a zero timestamp
// becomes in's, and with inputHeaders in's headers come first.
func toKgo(outs []Output, in *kgo.Record, inputHeaders bool) ([]*kgo.Record, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	var inh []kgo.RecordHeader
	var ts time.Time
	if in != nil {
		ts = in.Timestamp
		if inputHeaders {
			inh = in.Headers
		}
	}
	// One allocation for the records and one for all their headers: a
	// record is sent and acknowledged with the others of its call.
	recs := make([]kgo.Record, len(outs))
	// An output without headers of its own shares in's (capped: an
	// append copies); the others get theirs from one allocation.
	nh := 0
	for i := range outs {
		if n := len(outs[i].Headers); n > 0 {
			nh += len(inh) + n
		}
	}
	var hs []kgo.RecordHeader
	if nh > 0 {
		hs = make([]kgo.RecordHeader, nh)
	}
	rs := make([]*kgo.Record, len(outs))
	for i := range outs {
		o := &outs[i]
		// -1 asks the partitioner; -1 until it ran also tells a produce
		// error that none was assigned.
		p := int32(-1)
		if o.hasPartition {
			if o.partition < 0 {
				return nil, &flechtwerk.OutputError{Code: flechtwerk.CodeOutputPartition, Topic: o.Topic, Partition: o.partition, Partitions: -1}
			}
			p = o.partition
		}
		r := &recs[i]
		*r = kgo.Record{Topic: o.Topic, Partition: p, Key: o.Key, Value: o.Value, Timestamp: o.Timestamp}
		if o.Timestamp.IsZero() {
			r.Timestamp = ts
		}
		if len(o.Headers) == 0 && len(inh) > 0 {
			r.Headers = inh[:len(inh):len(inh)]
		} else if n := len(inh) + len(o.Headers); n > 0 {
			r.Headers = hs[:n:n]
			hs = hs[n:]
			copy(r.Headers, inh)
			for j, h := range o.Headers {
				r.Headers[len(inh)+j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
		rs[i] = r
	}
	return rs, nil
}

// stateCodecError is a state that did not decode or encode. The bytes
// are the store's, not the input record's: a codec error matching
// ErrInvalidRecord (a wire-format error) is not passed on, so that no
// policy skips or dead-letters the record; the call fails and the
// transaction aborts. The codec's other causes stay in the chain.
type stateCodecError struct {
	op  string // "decoding" or "encoding"
	key []byte
	err error
}

func (e *stateCodecError) Error() string {
	return fmt.Sprintf("transformer: %s state of key %q: %v", e.op, e.key, e.err)
}

// Unwrap returns the codec's error without what marks an invalid record.
func (e *stateCodecError) Unwrap() error { return errchain.Without(e.err, ErrInvalidRecord) }
