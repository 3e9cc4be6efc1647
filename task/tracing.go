package task

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk/internal/tracing"
)

// traced is what the commit span of a transaction needs of the batches it
// commits: the spans of their records (at most tracing.MaxLinks, the
// others counted) and their first and last input offsets per topic. Only
// a task with a Tracer keeps it.
type traced struct {
	spans       []trace.SpanContext
	dropped     int
	records     int
	first, last map[string]int64
}

// newTraced returns the trace of a processed chunk: recs (control records
// are not input) and the span contexts of the records that ran.
func newTraced(recs []*kgo.Record, spans []trace.SpanContext) *traced {
	tr := &traced{first: map[string]int64{}, last: map[string]int64{}}
	for _, r := range recs {
		if r.Attrs.IsControl() {
			continue
		}
		tr.records++
		if f, ok := tr.first[r.Topic]; !ok || r.Offset < f {
			tr.first[r.Topic] = r.Offset
		}
		if l, ok := tr.last[r.Topic]; !ok || r.Offset > l {
			tr.last[r.Topic] = r.Offset
		}
	}
	tr.add(spans, 0)
	return tr
}

// add keeps spans up to tracing.MaxLinks and counts the rest.
func (tr *traced) add(spans []trace.SpanContext, dropped int) {
	n := min(len(spans), tracing.MaxLinks-len(tr.spans))
	tr.spans = append(tr.spans, spans[:n]...)
	tr.dropped += dropped + len(spans) - n
}

// merge joins b's trace into tr.
func (tr *traced) merge(b *traced) {
	tr.add(b.spans, b.dropped)
	tr.records += b.records
	for topic, f := range b.first {
		if old, ok := tr.first[topic]; !ok || f < old {
			tr.first[topic] = f
		}
	}
	for topic, l := range b.last {
		if old, ok := tr.last[topic]; !ok || l > old {
			tr.last[topic] = l
		}
	}
}

// startCommit starts the span of the open transaction's commit.
func (t *Task) startCommit(ctx context.Context, o *open, stateWrites int) trace.Span {
	tr := o.trace
	if tr == nil {
		tr = &traced{}
	}
	_, span := t.tracer.StartCommit(ctx, &tracing.Commit{
		Task:        t.cfg.Partition,
		Records:     tr.records,
		Outputs:     o.outputs,
		StateWrites: stateWrites,
		First:       tr.first,
		Last:        tr.last,
		Links:       tr.spans,
		Dropped:     tr.dropped,
	})
	return span
}
