// Package tracing is the OpenTelemetry tracing of a transformer's tasks: a
// span per processed record, a child of the trace context its headers carry;
// that span's context in the headers of the record's outputs; a span per
// transaction commit, linked to the spans of the records it commits.
//
// A nil *Tracer is tracing off: callers check for nil and do nothing else,
// so a run without a TracerProvider neither reads headers nor allocates.
package tracing
