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

// fakeInterval is a committed transaction as the recorder sees it.
type fakeInterval struct {
	recs []*kgo.Record
	res  *batch.Result
}

func (f fakeInterval) Transactional() bool { return true }
func (f fakeInterval) Inputs(fn func(string, int, int64)) {
	var bytes int64
	for _, r := range f.recs {
		bytes += int64(len(r.Key) + len(r.Value))
	}
	fn("in", len(f.recs), bytes)
}
func (f fakeInterval) Outputs(fn func(string, int, int64)) {
	var bytes int64
	for _, r := range f.res.Outputs {
		bytes += int64(len(r.Key) + len(r.Value))
	}
	fn("out", len(f.res.Outputs), bytes)
}
func (f fakeInterval) StateWrites() int { return len(f.res.Writes) }
func (f fakeInterval) StateValues(fn func(int)) {
	for _, w := range f.res.Writes {
		fn(len(w.Value))
	}
}

// BenchmarkHooks runs one chunk of 500 records through the batch engine
// (a per-key counter), with the hooks the runner calls per chunk and per
// commit (one commit per chunk: the most the runner ever calls them),
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
				rec.Chunk(len(recs), began, time.Now())
				rec.Committed(0, fakeInterval{recs, res}, time.Since(began))
			}
		})
	}
}

// BenchmarkCommitHook is the cost of the per-commit hook alone for a
// transaction of 500 input and 250 output records.
func BenchmarkCommitHook(b *testing.B) {
	rec, err := metrics.New(prometheus.NewRegistry(), "bench")
	require.NoError(b, err)
	recs := make([]*kgo.Record, 500)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "in", Key: []byte("key"), Value: []byte("value")}
	}
	res := &batch.Result{Outputs: recs[:250]}
	for b.Loop() {
		rec.Committed(0, fakeInterval{recs, res}, time.Millisecond)
	}
}
