// Package store is the local state of one task: a Pebble database under
// {state dir}/{application id}/{partition}.
//
// A store holds only state that Kafka has committed. The runtime writes it
// after the task's transaction committed (Apply), and rebuilds it from the
// task's changelog partition when the task starts (Reset, then Apply in
// batches while restoring). It is a cache of the changelog, never a source
// of truth: a store left behind by a crash is wiped, not trusted.
//
// # Concurrency
//
// Get may be called concurrently with itself. Apply, Reset and Close must
// not run concurrently with any other method. A second Close is a no-op.
package store
