package tracing

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestNewNilProviderIsOff(t *testing.T) {
	require.Nil(t, New(nil, nil, "app"))
	require.NotNil(t, New(noop.NewTracerProvider(), nil, "app"))
}

// TestHeadersSet: Set leaves one header of its key, in the place of the
// first, and never writes into the slice it replaces (an output's headers
// may share their array with another record's).
func TestHeadersSet(t *testing.T) {
	h := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	tests := []struct {
		name     string
		in, want []kgo.RecordHeader
	}{
		{"none", nil, h("traceparent", "new")},
		{"other", h("a", "1"), h("a", "1", "traceparent", "new")},
		{"replaced", h("a", "1", "traceparent", "old", "b", "2"), h("a", "1", "traceparent", "new", "b", "2")},
		{"duplicates", h("traceparent", "old", "a", "1", "traceparent", "older"), h("traceparent", "new", "a", "1")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			shared := make([]kgo.RecordHeader, len(tc.in), len(tc.in)+4)
			copy(shared, tc.in)
			// the whole array, spare capacity included
			orig := append([]kgo.RecordHeader(nil), shared[:cap(shared)]...)
			hs := shared
			c := Headers{&hs}
			c.Set("traceparent", "new")
			require.Equal(t, tc.want, hs)
			require.Equal(t, orig, shared[:cap(shared)], "the old array was written")
			require.Equal(t, "new", c.Get("traceparent"))
			require.Len(t, c.Keys(), len(tc.want))
		})
	}
}

// TestInject: every output gets the span's traceparent, in place of one it
// carried; its other headers stay.
func TestInject(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 1},
		SpanID:     trace.SpanID{0x00, 0xf0, 2},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	outs := []*kgo.Record{
		{Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("old")}, {Key: "a", Value: []byte("1")}}},
		{},
	}
	New(noop.NewTracerProvider(), nil, "app").Inject(ctx, outs)
	require.Equal(t, []kgo.RecordHeader{{Key: "traceparent", Value: []byte(want)}, {Key: "a", Value: []byte("1")}}, outs[0].Headers)
	require.Equal(t, []kgo.RecordHeader{{Key: "traceparent", Value: []byte(want)}}, outs[1].Headers)
}
