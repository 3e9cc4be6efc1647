// Package stage is the engine's side of the stages users build: the
// interfaces through which the runtime drives a transformer (and an
// extractor), without the user-facing packages exporting any of it. A
// transformer's view (Transformer, Input, Result, Op) is the public
// contract of package task/process, under aliases.
//
// A user-facing package (transformer, extractor) registers, from its init, a
// lookup that recognizes its own values through an interface with an
// unexported method, so only its types match; the runtime finds the engine
// view of a value a user passed with TransformerOf. Users never import this
// package, and the engine may change it freely.
//
// Callers: runner (to look a stage up), task and internal/batch (to run
// it), and transformertest (which runs it the same way the runtime does).
// Implementations run user code (state-key functions, transforms, codecs)
// and may panic; the caller recovers (internal/batch does, into the
// record's *transformer.ProcessError).
//
// # Concurrency
//
// Registration happens at init; lookups are safe for concurrent use.
package stage
