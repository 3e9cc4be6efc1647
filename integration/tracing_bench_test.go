package integration

import (
	"context"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/tracing"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// BenchmarkTracing runs one chunk of the benchmark's workload (500
// records, each with a traceparent header, over 400 keys of a per-key
// counter with two outputs per record, 64 slots) through a task's batch
// run with tracing off, with the OpenTelemetry no-op provider, and with
// the SDK sampling every span into a batching no-op exporter; compare
// their ns/op, B/op and allocs/op:
//
//	go test ./integration -run '^$' -bench Tracing -count 6
func BenchmarkTracing(b *testing.B) {
	tr, ok := stage.TransformerOf(transformer.New(func(_ context.Context, r *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send("out", r.Key, strconv.AppendInt([]byte("count="), int64(n), 10))
		e.Send("out", r.Key, strconv.AppendInt([]byte("double="), 2*int64(n), 10))
		return nil
	}))
	if !ok {
		b.Fatal("not a transformer")
	}
	const records, keys = 500, 400
	recs := make([]*kgo.Record, records)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "in", Offset: int64(i), Key: []byte("key-" + strconv.Itoa(i%keys)), Value: []byte("v"),
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(upstream)}}}
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", nil},
		{"noop-provider", noop.NewTracerProvider()},
		{"sdk", sdk},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := batch.Params{
				Transformer: tr,
				State:       func([]byte) ([]byte, bool, error) { return []byte("41"), true, nil },
				Sem:         make(chan struct{}, 64),
				Name:        "bench",
				Policy:      &batch.Policy{},
				Tracer:      tracing.New(tc.tp, nil, "bench"),
			}
			b.ReportAllocs()
			for b.Loop() {
				res, err := batch.Run(context.Background(), p, recs)
				if err != nil || len(res.Outputs) != 2*records {
					b.Fatalf("err %v, %d outputs", err, len(res.Outputs))
				}
			}
		})
	}
}
