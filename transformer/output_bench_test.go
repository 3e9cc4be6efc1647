package transformer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// BenchmarkOutputs is the cost per input record (Prepare and Process, two
// outputs each) of typed outputs and header propagation against untyped
// byte outputs (the baseline, "bytes"), measured in the same run. The
// typed outputs use byte codecs, so that the codecs' own work is not
// counted: what is measured is the declaration's.
func BenchmarkOutputs(b *testing.B) {
	variants, in := outputVariants()
	ctx := context.Background()
	for _, v := range variants {
		tr, _ := stage.TransformerOf(v.st)
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				processOnce(b, ctx, tr, in)
			}
		})
	}
}

// BenchmarkOutputsRatio runs the variants of BenchmarkOutputs interleaved,
// in rounds of 1000 records each, so that a machine's drift hits them
// alike, and reports each one's time per record relative to "bytes"
// (the minimum over rounds of each, the least disturbed).
func BenchmarkOutputsRatio(b *testing.B) {
	variants, in := outputVariants()
	ctx := context.Background()
	trs := make([]stage.Transformer, len(variants))
	for i, v := range variants {
		trs[i], _ = stage.TransformerOf(v.st)
	}
	const round = 1000
	best := make([]time.Duration, len(variants))
	for i := 0; i < b.N; i += round {
		for j, tr := range trs {
			start := time.Now()
			for range round {
				processOnce(b, ctx, tr, in)
			}
			if d := time.Since(start); best[j] == 0 || d < best[j] {
				best[j] = d
			}
		}
	}
	for j, v := range variants {
		b.ReportMetric(float64(best[j].Nanoseconds())/round, v.name+"-ns/rec")
		if j > 0 {
			b.ReportMetric(float64(best[j])/float64(best[0]), v.name+"/bytes")
		}
	}
}

func processOnce(b *testing.B, ctx context.Context, tr stage.Transformer, in *kgo.Record) {
	p, err := tr.Prepare(in)
	if err != nil {
		b.Fatal(err)
	}
	res, err := tr.Process(ctx, p, nil, false)
	if err != nil || len(res.Outputs) != 2 {
		b.Fatal(err, len(res.Outputs))
	}
}

type outputVariant struct {
	name string
	st   any
}

func outputVariants() ([]outputVariant, *kgo.Record) {
	raw := transformer.DeclareOutput("out", transformer.Bytes(), transformer.Bytes())
	variants := []outputVariant{
		{"bytes", transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
			o.Send("out", rec.Key, rec.Value)
			o.Send("out", rec.Key, rec.Value)
			return nil
		})},
		{"typed", transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
			if err := raw.Send(o, rec.Key, rec.Value); err != nil {
				return err
			}
			return raw.Send(o, rec.Key, rec.Value)
		}, transformer.Produces(raw))},
		{"headers", transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
			o.Send("out", rec.Key, rec.Value)
			o.Send("out", rec.Key, rec.Value)
			return nil
		}, transformer.InputHeaders())},
		{"typed+headers", transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
			if err := raw.Send(o, rec.Key, rec.Value); err != nil {
				return err
			}
			return raw.Send(o, rec.Key, rec.Value)
		}, transformer.Produces(raw), transformer.InputHeaders())},
	}
	in := &kgo.Record{Topic: "in", Key: []byte("key-000042"), Value: make([]byte, 100), Timestamp: time.UnixMilli(1),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}, {Key: "tenant", Value: []byte("a")}}}
	return variants, in
}
