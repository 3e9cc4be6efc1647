package changelog

import (
	"context"
	"time"

	"github.com/flechtwerk/flechtwerk/internal/restore"
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

// WithProgress returns a context that makes Restore (and Recover) call fn
// after every batch of records it applied, on the restore's goroutine. fn
// must be quick.
func WithProgress(ctx context.Context, fn func(Progress)) context.Context {
	return restore.WithProgress(ctx, func(p restore.Progress) { fn(Progress(p)) })
}
