package runner

import (
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk/internal/config"
)

// WithTracerProvider turns OpenTelemetry tracing on, with spans from tp
// (instrumentation scope "github.com/flechtwerk/flechtwerk"):
//
//   - "flechtwerk.process <topic>", a consumer span per input record that
//     runs, a child of the trace context the propagator (WithPropagator)
//     extracts from the record's headers, or the root of a new trace when
//     they carry none. Its context is the transform's ctx, so spans the
//     transform starts are its children. Attributes: messaging.system
//     (kafka), messaging.destination.name (the topic),
//     messaging.destination.partition.id, messaging.kafka.offset,
//     messaging.consumer.group.name and flechtwerk.application.id (the
//     application id), flechtwerk.task.partition. A record that fails the
//     batch ends its span with an error status.
//   - The span's context is injected into the headers of the record's
//     outputs (replacing the propagator's headers they carried), so a
//     downstream service continues the trace.
//   - "flechtwerk.commit", a span per transaction commit of a task, linked
//     to the spans of the records it commits (at most 128 links;
//     flechtwerk.commit.links_dropped counts the rest), with the task, the
//     record count (messaging.batch.message_count), the outputs, the state
//     writes, and the first and last input offsets per topic
//     (flechtwerk.commit.topics, .first_offsets, .last_offsets).
//
// Without it (or with nil) tracing is off and costs nothing: headers are
// not read and no OpenTelemetry API is called.
func WithTracerProvider(tp trace.TracerProvider) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.TracerProvider = tp }}
}

// WithPropagator sets how trace context is read from input headers and
// written to output headers when tracing is on (WithTracerProvider).
// Default: W3C trace context (propagation.TraceContext: traceparent,
// tracestate); pass propagation.NewCompositeTextMapPropagator to add
// baggage or another format.
func WithPropagator(p propagation.TextMapPropagator) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.Propagator = p }}
}
