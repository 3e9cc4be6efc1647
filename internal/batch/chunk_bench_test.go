package batch

import (
	"context"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// chunkBench is one chunk of the benchmark's workload: 500 records over
// 400 keys of a per-key counter with a JSON state and two outputs per
// record, 64 slots, every record carrying a W3C traceparent header.
func chunkBench(b *testing.B) (Params, []*kgo.Record) {
	b.Helper()
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
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}
	}
	return Params{
		Transformer: tr,
		State:       func([]byte) ([]byte, bool, error) { return []byte("41"), true, nil },
		Sem:         make(chan struct{}, 64),
		Name:        "bench",
		Policy:      &Policy{},
	}, recs
}

// BenchmarkRunChunk runs one chunk through Run with tracing off (no
// Params.Tracer): the cost tracing adds when it is not configured is
// measured by running it on the code before and after tracing, e.g.
//
//	go test ./internal/batch -run '^$' -bench RunChunk -count 10
//
// The cost with tracing on is BenchmarkTracing of the integration module.
func BenchmarkRunChunk(b *testing.B) {
	p, recs := chunkBench(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := Run(ctx, p, recs)
		if err != nil || len(res.Outputs) != 2*len(recs) {
			b.Fatalf("err %v, %d outputs", err, len(res.Outputs))
		}
	}
}
