package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// fakeBatch is a processed batch as the recorder sees it.
type fakeBatch struct{ res *batch.Result }

func (b fakeBatch) Empty() bool      { return len(b.res.Outputs) == 0 && len(b.res.Writes) == 0 }
func (b fakeBatch) Outputs() int     { return len(b.res.Outputs) }
func (b fakeBatch) StateWrites() int { return len(b.res.Writes) }
func (b fakeBatch) Sizes(output, state func(int)) {
	for _, r := range b.res.Outputs {
		output(len(r.Key) + len(r.Value))
	}
	for _, w := range b.res.Writes {
		state(len(w.Value))
	}
}

// BenchmarkHooks runs one task batch of 500 records through the batch
// engine (a per-key counter), with the hooks the runner calls per batch,
// without metrics (a nil recorder) and with them. The ratio of the two is
// the cost of metrics on the hot path.
func BenchmarkHooks(b *testing.B) {
	proc, ok := stage.TransformerOf(transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		e.Send("out", rec.Key, rec.Value)
		return nil
	}))
	require.True(b, ok)
	recs := make([]*kgo.Record, 500)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "in", Key: []byte(fmt.Sprintf("k%d", i%50)), Value: []byte("value"), Offset: int64(i)}
	}
	p := batch.Params{Transformer: proc, TopicOrder: map[string]int{"in": 0}, Sem: make(chan struct{}, 8), Name: "task 0",
		State: func([]byte) ([]byte, bool, error) { return nil, false, nil }}
	for _, on := range []bool{false, true} {
		var rec *metrics.Recorder
		if on {
			var err error
			rec, err = metrics.New(prometheus.NewRegistry(), "bench")
			require.NoError(b, err)
		}
		b.Run(fmt.Sprintf("metrics=%v", on), func(b *testing.B) {
			for b.Loop() {
				began := time.Now()
				res, err := batch.Run(context.Background(), p, recs)
				if err != nil {
					b.Fatal(err)
				}
				rec.TaskBatch(0, recs, fakeBatch{res}, began, time.Now(), nil)
				rec.Batch(len(recs), began)
			}
		})
	}
}

// BenchmarkTaskBatchHook is the cost of the per-task-batch hook alone for
// 500 records (the per-record part is a loop over key and value lengths).
func BenchmarkTaskBatchHook(b *testing.B) {
	rec, err := metrics.New(prometheus.NewRegistry(), "bench")
	require.NoError(b, err)
	recs := make([]*kgo.Record, 500)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "in", Key: []byte("key"), Value: []byte("value")}
	}
	res := &batch.Result{Outputs: recs[:250]}
	now := time.Now()
	for b.Loop() {
		rec.TaskBatch(0, recs, fakeBatch{res}, now, now, nil)
	}
}
