package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// upstream is the trace context of the upstream producer of the traced
// record: trace 4bf92f35..., span 00f067aa....
const upstream = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestTracing runs a stateful transformer over a record that carries a
// traceparent header and others that carry none. With a TracerProvider,
// the traced record's process span is a child of the upstream span with
// the record's coordinates as attributes, its output carries a traceparent
// of the same trace whose parent is that span, and the commit span of its
// transaction links to it; every record without a header starts a trace of
// its own. Without one, nothing is recorded even by the global provider,
// and no output carries a traceparent.
func TestTracing(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("on=%v", on), func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
			// A global provider must not turn tracing on.
			global := otel.GetTracerProvider()
			otel.SetTracerProvider(tp)
			t.Cleanup(func() { otel.SetTracerProvider(global) })

			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 2)
			c.CreateTopic(t, out, 2)
			recs := values(in, 1, "v", 6, 3)
			traced := recs[4] // key k1, its second record
			traced.Headers = []kgo.RecordHeader{{Key: "traceparent", Value: []byte(upstream)}}
			c.Produce(t, recs...)

			opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in), runner.StateDir(t.TempDir())}
			if on {
				opts = append(opts, runner.WithTracerProvider(tp))
			}
			rn := start(t, c, echoCounter(out, nil), opts...)
			waitCommitted(t, c, app, in, 30*time.Second, rn.done)
			require.NoError(t, rn.stop(t))
			outs := readStable(t, c, out)
			requireExactlyOnce(t, recs, outs)

			if !on {
				require.Empty(t, exp.GetSpans(), "spans recorded with tracing off")
				for _, o := range outs {
					require.Empty(t, header(o, "traceparent"), "output %s carries a traceparent", o.Value)
				}
				return
			}
			spans := exp.GetSpans()
			wantParent := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": upstream})
			parent := trace.SpanContextFromContext(wantParent)

			var process []tracetest.SpanStub
			for _, s := range spans {
				if strings.HasPrefix(s.Name, "flechtwerk.process ") {
					process = append(process, s)
				}
			}
			require.Len(t, process, len(recs), "one process span per record")
			i := slices.IndexFunc(process, func(s tracetest.SpanStub) bool {
				return attr(s.Attributes, "messaging.kafka.offset") == attribute.Int64Value(traced.Offset)
			})
			require.GreaterOrEqual(t, i, 0, "no span of the traced record")
			ps := process[i]
			require.Equal(t, "flechtwerk.process "+in, ps.Name)
			require.Equal(t, trace.SpanKindConsumer, ps.SpanKind)
			require.Equal(t, parent.TraceID(), ps.SpanContext.TraceID(), "trace of the upstream span")
			require.Equal(t, parent.SpanID(), ps.Parent.SpanID(), "child of the upstream span")
			require.True(t, ps.Parent.IsRemote())
			for k, v := range map[string]attribute.Value{
				"messaging.system":                   attribute.StringValue("kafka"),
				"messaging.destination.name":         attribute.StringValue(in),
				"messaging.destination.partition.id": attribute.StringValue("1"),
				"messaging.kafka.offset":             attribute.Int64Value(traced.Offset),
				"messaging.consumer.group.name":      attribute.StringValue(app),
				"flechtwerk.application.id":          attribute.StringValue(app),
				"flechtwerk.task.partition":          attribute.Int64Value(1),
			} {
				require.Equal(t, v, attr(ps.Attributes, k), k)
			}
			for _, s := range process {
				if s.SpanContext.SpanID() != ps.SpanContext.SpanID() {
					require.False(t, s.Parent.IsValid(), "a record without a header starts a trace: %v", s.Attributes)
					require.NotEqual(t, parent.TraceID(), s.SpanContext.TraceID())
				}
			}

			// The traced record's output continues its span.
			o := outs[slices.IndexFunc(outs, func(o *kgo.Record) bool { return string(o.Value) == string(traced.Value)+"#2" })]
			got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
				propagation.MapCarrier{"traceparent": header(o, "traceparent")}))
			require.Equal(t, ps.SpanContext.TraceID(), got.TraceID(), "output trace")
			require.Equal(t, ps.SpanContext.SpanID(), got.SpanID(), "output parent span")

			// The commit span of its transaction links to it.
			ci := slices.IndexFunc(spans, func(s tracetest.SpanStub) bool {
				return s.Name == "flechtwerk.commit" && slices.ContainsFunc(s.Links, func(l sdktrace.Link) bool {
					return l.SpanContext.Equal(ps.SpanContext)
				})
			})
			require.GreaterOrEqual(t, ci, 0, "no commit span links to the record's span")
			cs := spans[ci]
			require.Equal(t, attribute.Int64Value(1), attr(cs.Attributes, "flechtwerk.task.partition"))
			require.Equal(t, []string{in}, attr(cs.Attributes, "flechtwerk.commit.topics").AsStringSlice())
			first := attr(cs.Attributes, "flechtwerk.commit.first_offsets").AsInt64Slice()
			last := attr(cs.Attributes, "flechtwerk.commit.last_offsets").AsInt64Slice()
			require.LessOrEqual(t, first[0], traced.Offset)
			require.GreaterOrEqual(t, last[0], traced.Offset)
			require.Equal(t, last[0]-first[0]+1, attr(cs.Attributes, "messaging.batch.message_count").AsInt64())
			require.Len(t, cs.Links, int(attr(cs.Attributes, "messaging.batch.message_count").AsInt64()))

			t.Log("trace of the record at offset", traced.Offset, "(upstream parent span", parent.SpanID(), "):\n"+
				describe(ps)+describe(cs)+fmt.Sprintf("output %q: traceparent=%s\n", o.Value, header(o, "traceparent")))
		})
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func attr(attrs []attribute.KeyValue, key string) attribute.Value {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value
		}
	}
	return attribute.Value{}
}

// describe prints a span: name, kind, ids, parent, attributes, links.
func describe(s tracetest.SpanStub) string {
	var b strings.Builder
	fmt.Fprintf(&b, "span %q kind=%s trace=%s span=%s parent=%s status=%s\n", s.Name, s.SpanKind,
		s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID(), s.Status.Code)
	for _, a := range s.Attributes {
		fmt.Fprintf(&b, "    %s=%s\n", a.Key, a.Value.Emit())
	}
	for _, l := range s.Links {
		fmt.Fprintf(&b, "    link trace=%s span=%s\n", l.SpanContext.TraceID(), l.SpanContext.SpanID())
	}
	return b.String()
}
