package task

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/store"
)

// Batch is the processed, not yet committed, result of one batch of a task.
type Batch struct {
	outputs []*kgo.Record
	writes  []store.Write
	// Offsets are the next offsets to consume per input topic of the task.
	Offsets map[string]int64
	// Records is how many input records the batch held.
	Records int
	// for Stats
	inputs  []topicInput
	invalid invalidCounts
	// for the commit span (Config.TracerProvider only)
	trace *traced
}

// Empty reports whether the batch wrote nothing: no output and no state
// change. Its offsets must then be committed outside a transaction.
func (b *Batch) Empty() bool { return len(b.outputs) == 0 && len(b.writes) == 0 }

// Outputs returns how many output records the batch holds.
func (b *Batch) Outputs() int { return len(b.outputs) }

// StateWrites returns how many changelog writes (after dedupe) it holds.
func (b *Batch) StateWrites() int { return len(b.writes) }

// Process runs the transform over recs (all of this task's partition;
// transaction markers among them only advance the offsets),
// bounded by sem (one slot per concurrently running bucket), with the batch
// semantics of internal/batch. It neither produces nor commits. A record's
// error is a *transformer.ProcessError.
func (t *Task) Process(ctx context.Context, recs []*kgo.Record, sem chan struct{}) (*Batch, error) {
	if len(recs) == 0 {
		return &Batch{Offsets: make(map[string]int64)}, nil
	}
	res, err := batch.Run(ctx, batch.Params{
		Transformer: t.proc,
		Partition:   t.cfg.Partition,
		TopicOrder:  t.topicIdx,
		State:       t.get,
		Sem:         sem,
		Name:        fmt.Sprintf("task %d", t.cfg.Partition),
		Tracer:      t.tracer,
		Policy:      t.cfg.Policy,
	}, recs)
	if err != nil {
		return nil, err
	}
	for _, o := range res.Outputs {
		if o.Topic == t.cfg.Changelog && t.cfg.Changelog != "" {
			// Only the task writes its changelog: a record there would
			// be restored as some key's state.
			return nil, flechtwerk.Errorf(flechtwerk.CodeDuplicateTopic, "output",
				"task %d: an output record names the stage's changelog %s; a transform must not write the changelog", t.cfg.Partition, o.Topic)
		}
	}
	b := &Batch{outputs: res.Outputs, writes: res.Writes, Offsets: res.Offsets, Records: res.Records,
		inputs:  addInputs(make([]topicInput, 0, len(t.cfg.InputTopics)), recs),
		invalid: invalidCounts{res.Skipped, res.Substituted, res.DeadLettered}}
	if t.tracer != nil {
		var spans []trace.SpanContext
		if res.Spans != nil {
			spans = *res.Spans
		}
		b.trace = newTraced(recs, spans)
	}
	return b, nil
}

// get reads key from the open transaction's overlay, else from the store
// (committed state), unless the task is closed.
func (t *Task) get(key []byte) ([]byte, bool, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return nil, false, ErrClosed
	}
	if v, found, ok := t.overlayGet(key); ok {
		return v, found, nil
	}
	return t.store.Get(key)
}
