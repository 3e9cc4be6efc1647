package restore

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Progress is the state of a running Restore, reported to the function
// set with WithProgress.
type Progress struct {
	Topic     string
	Partition int32
	// Start and End are the offsets the restore reads: from the log start
	// (or a checkpoint) up to the last stable offset listed at its start.
	Start, End int64
	// Next is the offset after the last record read so far.
	Next int64
	// Records is how many records were applied so far; Applied how many
	// since the previous report.
	Records, Applied int
	// Began is when the restore started reading.
	Began time.Time
}

type progressKey struct{}

// WithProgress returns a context that makes Restore call fn after every
// batch of records it applied, on the restore's goroutine. fn must be
// quick.
func WithProgress(ctx context.Context, fn func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// progress reports a restore's progress to the function of its context.
type progress struct {
	fn func(Progress)
	p  Progress
}

func newProgress(ctx context.Context, topic string, partition int32, from, end int64) *progress {
	fn, _ := ctx.Value(progressKey{}).(func(Progress))
	return &progress{fn: fn, p: Progress{Topic: topic, Partition: partition, Start: from, End: end, Next: from, Began: time.Now()}}
}

// report records that rs were applied.
func (pr *progress) report(rs []*kgo.Record) {
	if pr.fn == nil || len(rs) == 0 {
		return
	}
	pr.p.Next = max(pr.p.Next, rs[len(rs)-1].Offset+1)
	pr.p.Records += len(rs)
	pr.p.Applied = len(rs)
	pr.fn(pr.p)
}
