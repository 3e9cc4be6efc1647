package batch

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// runBucketsPerGoroutine is how buckets ran before runBuckets: one new
// goroutine per bucket, each taking a slot of p.Sem first. It is the
// baseline of BenchmarkRunManyKeys.
func runBucketsPerGoroutine(ctx context.Context, p Params, buckets []*bucket, stateful bool) error {
	var wg sync.WaitGroup
	for _, bk := range buckets {
		select {
		case p.Sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return fmt.Errorf("%s: %w", p.Name, ctx.Err())
		}
		wg.Add(1)
		go func() {
			defer func() { <-p.Sem; wg.Done() }()
			runBucket(ctx, p, bk, stateful)
		}()
	}
	wg.Wait()
	return nil
}

// BenchmarkRunManyKeys runs the buckets of one chunk as a task of the
// benchmark's workload does: 500 records over 400 keys of a per-key
// counter with a JSON state and two outputs per record, 64 slots (the
// default Concurrency). It compares runBuckets with the goroutine per
// bucket it replaced, in the same process; compare the ns/op of the two:
//
//	go test ./internal/batch -run '^$' -bench RunManyKeys -count 5
func BenchmarkRunManyKeys(b *testing.B) {
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
		recs[i] = &kgo.Record{Topic: "in", Offset: int64(i), Key: []byte("key-" + strconv.Itoa(i%keys)), Value: []byte("v")}
	}
	p := Params{
		Transformer: tr,
		State:       func([]byte) ([]byte, bool, error) { return []byte("41"), true, nil },
		Sem:         make(chan struct{}, 64),
		Name:        "bench",
		Policy:      &Policy{},
	}
	buckets := func() []*bucket {
		byKey := map[string]*bucket{}
		var out []*bucket
		for _, r := range recs {
			in, err := prepare(tr, r)
			if err != nil {
				b.Fatal(err)
			}
			bk := byKey[string(in.Key)]
			if bk == nil {
				bk = &bucket{key: in.Key}
				byKey[string(in.Key)] = bk
				out = append(out, bk)
			}
			bk.recs = append(bk.recs, r)
			bk.in = append(bk.in, in)
		}
		return out
	}
	for _, run := range []struct {
		name string
		fn   func(context.Context, Params, []*bucket, bool) error
	}{
		{"goroutine-per-bucket", runBucketsPerGoroutine},
		{"runBuckets", runBuckets},
	} {
		b.Run(run.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				b.StopTimer()
				bks := buckets()
				b.StartTimer()
				if err := run.fn(ctx, p, bks, true); err != nil {
					b.Fatal(err)
				}
				for _, bk := range bks {
					if bk.err != nil || len(bk.outs) == 0 {
						b.Fatalf("bucket %s: err %v, %d outputs", bk.key, bk.err, len(bk.outs))
					}
				}
			}
		})
	}
}
