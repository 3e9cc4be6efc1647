package flechtwerk

import "context"

// Lifecycle is an optional interface for the value a stage is built from
// (a transformer.Transformer, an extractor.Poller or a sink.Sink
// implementation) that owns resources: an HTTP client, a connection pool.
// The runner detects it on that value and calls it around Run, as the
// stage's own methods are never called outside this window:
//
//   - Open is called once per Run, before anything is consumed or polled
//     and before any transaction or offset commit. An error (or a panic)
//     ends Run at once with an error matching ErrStageOpen that names the
//     stage; nothing was processed or committed, and Close is not called:
//     Open releases what it acquired before it failed.
//   - Close is called once, after Run's engine stopped (every call of the
//     stage's methods has returned), whether Run ends gracefully or with an
//     error. Its ctx is not canceled when Run's is. Its error is joined into
//     Run's error. The one exception: when Run ends with a batch timeout
//     (ErrBatchTimeout), a transform that ignored its ctx may still run,
//     so Close is not called; the process should exit.
//
// Neither is called concurrently with the stage's methods or with each
// other. A stage built from functions (transformer.Func, extractor.Func,
// sink.WriteFunc) has no lifecycle.
type Lifecycle interface {
	Open(ctx context.Context) error
	Close(ctx context.Context) error
}
