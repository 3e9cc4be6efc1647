package task

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// Batch is the processed, not yet committed, result of one batch of a task.
type Batch struct {
	outputs []*kgo.Record
	writes  []store.Write
	// named are the writes to named stores, timers the timer operations
	// (a process.Stores processor).
	named  []process.StoreWrite
	timers []process.TimerOp
	// stream is the stream time after the batch; advanced: the batch
	// moved it (a processor with timers only).
	stream   int64
	advanced bool
	fired    int
	moreDue  bool
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

// Empty reports whether the batch wrote nothing: no output, no state
// change, no timer and no move of the stream time. Its offsets must then
// be committed outside a transaction.
func (b *Batch) Empty() bool {
	return len(b.outputs) == 0 && len(b.writes) == 0 && len(b.named) == 0 && len(b.timers) == 0 && !b.advanced
}

// Outputs returns how many output records the batch holds.
func (b *Batch) Outputs() int { return len(b.outputs) }

// StateWrites returns how many changelog writes (after dedupe) it holds:
// of the default store, the named stores and the timers.
func (b *Batch) StateWrites() int { return len(b.writes) + len(b.named) + len(b.timers) }

// Fired returns how many timers fired in the batch.
func (b *Batch) Fired() int { return b.fired }

// MoreDue reports that timers due by the batch's end were left for later
// batches (a batch fires at most Config.MaxTimers timers of keys without
// records): Tick again at once.
// Task.TimersDue also finds them (and a timer a callback set again in the
// past, which fires in the next batch).
func (b *Batch) MoreDue() bool { return b.moreDue }

// Process runs the transform over recs (all of this task's partition;
// transaction markers among them only advance the offsets),
// bounded by sem (one slot per concurrently running bucket), with the batch
// semantics of internal/batch. It neither produces nor commits. A record's
// error is a *transformer.ProcessError. The timers of a processor with
// timers that are due fire in the batch (see internal/batch).
func (t *Task) Process(ctx context.Context, recs []*kgo.Record, sem chan struct{}) (*Batch, error) {
	if len(recs) == 0 {
		return &Batch{Offsets: make(map[string]int64)}, nil
	}
	return t.run(ctx, recs, sem)
}

// Tick runs a batch without records for a task with timers: the timers
// that are due fire (wall-clock timers due by now; event-time timers due
// by the stream time, set in the open transaction). Add the batch as any
// other; it has no offsets. Without timers it returns an empty batch.
func (t *Task) Tick(ctx context.Context, sem chan struct{}) (*Batch, error) {
	if !t.HasTimers() {
		return &Batch{Offsets: make(map[string]int64)}, nil
	}
	return t.run(ctx, nil, sem)
}

func (t *Task) run(ctx context.Context, recs []*kgo.Record, sem chan struct{}) (*Batch, error) {
	p := batch.Params{
		Transformer: t.proc,
		Partition:   t.cfg.Partition,
		TopicOrder:  t.topicIdx,
		State:       t.get,
		Sem:         sem,
		Name:        fmt.Sprintf("task %d", t.cfg.Partition),
		Tracer:      t.tracer,
		Policy:      t.cfg.Policy,
	}
	if t.cfg.MaxTimers > 0 {
		p.MaxTimers = t.cfg.MaxTimers
	}
	// Read as a store read (enter), before Run: Close drops the timer
	// store, and a batch abandoned at its timeout may start or return
	// after Close.
	if !t.enter() {
		return nil, fmt.Errorf("task %d: batch not run: %w", t.cfg.Partition, ErrClosed)
	}
	stream, timers := t.stream, t.timers != nil
	t.leave()
	if t.sp != nil {
		p.View = &view{t: t, stream: stream, now: time.Now()}
		if timers {
			p.Due, p.KeyTimers = t.due, t.keyTimers()
			p.StampedState = t.getStamped
		}
	}
	res, err := batch.Run(ctx, p, recs)
	if err != nil {
		return nil, err
	}
	for _, o := range res.Outputs {
		if t.changelogTopic(o.Topic) {
			// Only the task writes its changelogs: a record there would
			// be restored as some key's state.
			return nil, flechtwerk.Errorf(flechtwerk.CodeDuplicateTopic, "output",
				"task %d: an output record names the stage's changelog %s; a transform must not write the changelog", t.cfg.Partition, o.Topic)
		}
	}
	b := &Batch{outputs: res.Outputs, writes: res.Writes, Offsets: res.Offsets, Records: res.Records,
		inputs:  addInputs(make([]topicInput, 0, len(t.cfg.InputTopics)), recs),
		invalid: invalidCounts{res.Skipped, res.Substituted, res.DeadLettered}}
	if b.Offsets == nil {
		b.Offsets = make(map[string]int64)
	}
	if t.sp != nil {
		b.named, b.timers, b.fired, b.moreDue = res.StoreWrites, res.Timers, res.Fired, res.MoreDue
		if timers && res.StreamTime > stream {
			b.stream, b.advanced = res.StreamTime, true
		}
	}
	if t.tracer != nil {
		var spans []trace.SpanContext
		if res.Spans != nil {
			spans = *res.Spans
		}
		b.trace = newTraced(recs, spans)
	}
	return b, nil
}

// changelogTopic reports whether topic is a changelog of the task.
func (t *Task) changelogTopic(topic string) bool {
	if topic == "" {
		return false
	}
	for _, c := range t.topics {
		if c == topic {
			return true
		}
	}
	return topic == t.timersTopic
}

// getStamped is get that also returns the stamp of key's last write,
// and whether the open or the last transaction made it: a write the last
// transaction committed is read from its overlay (Task.last), which the
// store holds too.
func (t *Task) getStamped(key []byte) (batch.Stamped, error) {
	if !t.enter() {
		return batch.Stamped{}, ErrClosed
	}
	defer t.leave()
	w, ok := t.open.stores[0].m[string(key)]
	if !ok {
		w, ok = t.last[string(key)]
	}
	if ok {
		if w.Delete {
			return batch.Stamped{Recent: true}, nil
		}
		return batch.Stamped{Value: bytes.Clone(w.Value), Found: true, Stamp: w.Stamp, Recent: true}, nil
	}
	if t.stores[0] == nil {
		return batch.Stamped{}, nil
	}
	v, st, found, err := t.stores[0].GetStamped(key)
	return batch.Stamped{Value: v, Found: found, Stamp: st}, err
}

// get reads key from the open transaction's overlay, else from the store
// (committed state), unless the task is closed.
func (t *Task) get(key []byte) ([]byte, bool, error) {
	if !t.enter() {
		return nil, false, ErrClosed
	}
	defer t.leave()
	if v, found, ok := t.overlayGet(key); ok {
		return v, found, nil
	}
	if t.stores[0] == nil {
		return nil, false, nil
	}
	return t.stores[0].Get(key)
}
