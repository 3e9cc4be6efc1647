// Package stage is the engine's side of the stages users build: the
// interfaces through which the engines drive a transformer (Transformer),
// an extractor (Extractor, Page) and a sink (Sink), and the Handle that
// ties a user-facing stage value to its engine view, without the
// user-facing packages exporting any of it. A transformer's view
// (Transformer, Input, Result, Op) is the public contract of package
// task/process, under aliases.
//
// A user-facing stage type (transformer.Stage, extractor.Stage,
// sink.Stage, mqttbridge.Bridge) embeds a Handle under an unexported alias,
// set by its constructors. The runtime finds the engine view of a value a
// user passed with TransformerOf, ExtractorOf, SinkOf or ViewOf, and the
// user's own implementation (for its optional flechtwerk.Lifecycle) with
// ImplOf. There is no registry and no init-time state. Users never import
// this package, and the engine may change it freely.
//
// Callers: runner (to look a stage up), task and internal/batch (to run a
// transformer), internal/engine/extract (an extractor), the sink engine, and
// transformertest (which runs a transformer the same way the runtime
// does). Implementations run user code (state-key functions, transforms,
// codecs, poll functions, sinks) and may panic; each interface says who
// recovers.
//
// # Concurrency
//
// A Handle is immutable once its stage is built; lookups are safe for
// concurrent use.
package stage
