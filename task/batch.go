package task

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// ProcessError is a transform error. The task's batch was not committed:
// nothing of it is visible and its offsets did not advance, so the record is
// redelivered when the task runs again.
type ProcessError struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Err       error
}

func (e *ProcessError) Error() string {
	return fmt.Sprintf("task: transform failed at topic %s partition %d offset %d (key %q): %v; batch aborted, offsets not advanced",
		e.Topic, e.Partition, e.Offset, e.Key, e.Err)
}

func (e *ProcessError) Unwrap() error { return e.Err }

// PanicError is a panic in user code (the transform, the state-key function
// or a state codec), recovered by the task. It is the Err of a
// *ProcessError naming the record, so it is handled like an error the
// transform returned: the batch is aborted and Run ends with it.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the stack of the panicking goroutine.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// recovered turns a recovered panic value into a *PanicError.
func recovered(v any) error {
	return &PanicError{Value: v, Stack: debug.Stack()}
}

// stateKey calls the processor's state-key function, recovering a panic.
func (t *Task) stateKey(rec *transformer.Record) (key []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered(v)
		}
	}()
	return t.proc.StateKey(rec), nil
}

// process calls the processor for one record, recovering a panic.
func (t *Task) process(ctx context.Context, rec *transformer.Record, state []byte, found bool) (res transformer.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered(v)
		}
	}()
	return t.proc.Process(ctx, rec, state, found)
}

// get reads key from the store, unless the task is closed.
func (t *Task) get(key []byte) ([]byte, bool, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return nil, false, ErrClosed
	}
	return t.store.Get(key)
}

// Batch is the processed, not yet committed, result of one batch of a task.
type Batch struct {
	outputs []*kgo.Record
	writes  []store.Write
	// Offsets are the next offsets to consume per input topic of the task.
	Offsets map[string]int64
	// Records is how many input records the batch held.
	Records int
}

// Empty reports whether the batch wrote nothing: no output and no state
// change. Its offsets must then be committed outside a transaction.
func (b *Batch) Empty() bool { return len(b.outputs) == 0 && len(b.writes) == 0 }

// Outputs returns how many output records the batch holds.
func (b *Batch) Outputs() int { return len(b.outputs) }

// StateWrites returns how many changelog writes (after dedupe) it holds.
func (b *Batch) StateWrites() int { return len(b.writes) }

type bucket struct {
	key  []byte
	recs []*kgo.Record
	in   []*transformer.Record // recs as the transformer sees them
	outs []*kgo.Record
	// final state of the key
	op    transformer.StateOp
	state []byte
	err   error
}

// Process runs the transform over recs (all of this task's partition;
// transaction markers among them only advance the offsets),
// bounded by sem (one slot per concurrently running bucket). It neither
// produces nor commits.
func (t *Task) Process(ctx context.Context, recs []*kgo.Record, sem chan struct{}) (*Batch, error) {
	b := &Batch{Offsets: make(map[string]int64), Records: len(recs)}
	if len(recs) == 0 {
		return b, nil
	}
	ordered := slices.Clone(recs)
	slices.SortStableFunc(ordered, func(x, y *kgo.Record) int {
		if c := cmp.Compare(t.topicIdx[x.Topic], t.topicIdx[y.Topic]); c != 0 {
			return c
		}
		return cmp.Compare(x.Offset, y.Offset)
	})
	for _, r := range ordered {
		if r.Partition != t.cfg.Partition {
			return nil, fmt.Errorf("task %d: got record of topic %s partition %d", t.cfg.Partition, r.Topic, r.Partition)
		}
		if next := r.Offset + 1; next > b.Offsets[r.Topic] {
			b.Offsets[r.Topic] = next
		}
	}
	// Transaction markers of transactional producers upstream take
	// offsets too. They count for the committed offset (or lag would stay
	// at 1 behind every marker) but are not input.
	ordered = slices.DeleteFunc(ordered, func(r *kgo.Record) bool { return r.Attrs.IsControl() })
	b.Records = len(ordered)

	stateful := t.proc.Stateful()
	var buckets []*bucket
	byKey := make(map[string]*bucket)
	for _, r := range ordered {
		rec := toRecord(r)
		key, err := t.stateKey(rec)
		if err != nil {
			return nil, &ProcessError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Err: err}
		}
		if stateful && len(key) == 0 {
			return nil, &ProcessError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key,
				Err: errors.New("record has an empty state key; a stateful transformer needs one (set transformer.StateKey)")}
		}
		bk := byKey[string(key)]
		if bk == nil {
			bk = &bucket{key: key}
			byKey[string(key)] = bk
			buckets = append(buckets, bk)
		}
		bk.recs = append(bk.recs, r)
		bk.in = append(bk.in, rec)
	}

	var wg sync.WaitGroup
	for _, bk := range buckets {
		// A spent deadline wins over a free slot: the batch is over.
		if err := ctx.Err(); err != nil {
			wg.Wait()
			return nil, fmt.Errorf("task %d: %w", t.cfg.Partition, err)
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, fmt.Errorf("task %d: %w", t.cfg.Partition, ctx.Err())
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			t.runBucket(ctx, bk, stateful)
		}()
	}
	wg.Wait()

	for _, bk := range buckets {
		if bk.err != nil {
			return nil, bk.err
		}
	}
	for _, bk := range buckets {
		b.outputs = append(b.outputs, bk.outs...)
		switch bk.op {
		case transformer.StatePut:
			b.writes = append(b.writes, store.Write{Key: bk.key, Value: bk.state})
		case transformer.StateDelete:
			b.writes = append(b.writes, store.Write{Key: bk.key, Delete: true})
		}
	}
	return b, nil
}

func (t *Task) runBucket(ctx context.Context, bk *bucket, stateful bool) {
	var (
		cur   []byte
		found bool
	)
	if stateful {
		var err error
		cur, found, err = t.get(bk.key)
		if err != nil {
			bk.err = fmt.Errorf("task %d: %w", t.cfg.Partition, err)
			return
		}
	}
	for i, r := range bk.recs {
		res, err := t.process(ctx, bk.in[i], cur, found)
		if err != nil {
			bk.err = &ProcessError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Err: err}
			return
		}
		for _, o := range res.Outputs {
			bk.outs = append(bk.outs, toKgo(o))
		}
		if !stateful {
			continue
		}
		switch res.Op {
		case transformer.StatePut:
			cur, found = res.State, true
			bk.op, bk.state = transformer.StatePut, res.State
		case transformer.StateDelete:
			// A delete of a key that never existed before this batch
			// still writes a tombstone: cheap, and always correct.
			cur, found = nil, false
			bk.op, bk.state = transformer.StateDelete, nil
		}
	}
}

func toRecord(r *kgo.Record) *transformer.Record {
	rec := &transformer.Record{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
	}
	if len(r.Headers) > 0 {
		rec.Headers = make([]transformer.Header, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = transformer.Header{Key: h.Key, Value: h.Value}
		}
	}
	return rec
}

func toKgo(o transformer.Output) *kgo.Record {
	// The partitioner sets the partition; -1 until it ran tells a produce
	// error that none was assigned.
	r := &kgo.Record{Topic: o.Topic, Partition: -1, Key: o.Key, Value: o.Value}
	if len(o.Headers) > 0 {
		r.Headers = make([]kgo.RecordHeader, len(o.Headers))
		for i, h := range o.Headers {
			r.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	return r
}
