package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// handle ties a *Stage to its engine view (internal/stage); the alias
// keeps the embedded field unexported.
type handle = stage.Handle

// adapter is the engine's view of a *Stage[V].
type adapter[V any] struct{ s *Stage[V] }

func (a adapter[V]) Validate() error { return a.s.Validate() }

func (a adapter[V]) Delivery() stage.Delivery {
	if a.s == nil {
		return stage.Unset
	}
	switch a.s.mode {
	case AtLeastOnce:
		return stage.AtLeastOnce
	case AtMostOnce:
		return stage.AtMostOnce
	}
	return stage.Unset
}

func (a adapter[V]) HasResume() bool { return a.s.resume != nil }

func recover2(err *error) {
	if v := recover(); v != nil {
		*err = flechtwerk.Recovered(v)
	}
}

func (a adapter[V]) Prepare(ctx context.Context, r *kgo.Record) (outs []stage.Output, err error) {
	s := a.s
	if r.Value == nil && !s.tombstones {
		return nil, nil
	}
	rec := Record[V]{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Key: r.Key, Timestamp: r.Timestamp, Tombstone: r.Value == nil,
	}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, Header{Key: h.Key, Value: h.Value})
	}
	// A value that does not decode, or a record Expand rejects as
	// invalid (transformer.ErrInvalidRecord, transformer.Invalid), is an
	// invalid record: the runner's InvalidRecords policy decides what
	// becomes of it.
	invalid := func(part transformer.Part, err error) error {
		ie := &transformer.InvalidRecordError{Part: part, Err: err}
		var given *transformer.InvalidRecordError
		if errors.As(err, &given) {
			c := *given
			ie = &c
		}
		ie.Topic, ie.Partition, ie.Offset = r.Topic, r.Partition, r.Offset
		ie.Key, ie.Value, ie.Headers = r.Key, r.Value, rec.Headers
		return ie
	}
	if r.Value != nil {
		if err := func() (err error) {
			defer recover2(&err)
			rec.Value, err = s.codec.Decode(r.Value)
			return err
		}(); err != nil {
			if errors.Is(err, flechtwerk.ErrUnavailable) {
				// Not the record's fault: nothing past it is committed.
				return nil, &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Part: "value", Err: err}
			}
			return nil, invalid(transformer.PartValue, err)
		}
	}
	if s.expand == nil {
		return []stage.Output{rec}, nil
	}
	var recs []Record[V]
	if err := func() (err error) {
		defer recover2(&err)
		recs, err = s.expand(ctx, rec)
		return err
	}(); err != nil {
		if errors.Is(err, transformer.ErrInvalidRecord) {
			return nil, invalid(transformer.PartValue, err)
		}
		return nil, &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Part: "expand", Err: err}
	}
	outs = make([]stage.Output, len(recs))
	for i, o := range recs {
		outs[i] = o
	}
	return outs, nil
}

func (a adapter[V]) Write(ctx context.Context, outs []stage.Output) (err error) {
	batch := make([]Record[V], len(outs))
	for i, o := range outs {
		rec, ok := o.(Record[V])
		if !ok {
			return fmt.Errorf("sink: internal error: output is %T, not prepared by this sink", o)
		}
		batch[i] = rec
	}
	defer recover2(&err)
	return a.s.sink.Write(ctx, batch)
}

func (a adapter[V]) Resume(ctx context.Context, topic string, partitions []int32) (offs map[int32]int64, err error) {
	if a.s.resume == nil {
		return nil, nil
	}
	defer recover2(&err)
	return a.s.resume(ctx, topic, partitions)
}
