package batch

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// emptyView is a process.State with no committed state and no timers.
type emptyView struct{}

func (emptyView) Get(int, []byte) ([]byte, bool, error) { return nil, false, nil }
func (emptyView) Scan(int, []byte, []byte, func(k, v []byte) (bool, error)) error {
	return nil
}
func (emptyView) StreamTime() int64 { return 0 }
func (emptyView) Now() time.Time    { return time.UnixMilli(0) }
func (emptyView) Stamp([]byte) (process.Stamp, bool, error) {
	return process.Stamp{}, false, nil
}

// BenchmarkRunStoresChunk runs one chunk of 500 records over 400 keys of
// a per-key counter through Run: "plain" as a Processor, "timers" with
// a timer per key re-armed by every record and StateTTL, as
// BenchmarkTimersThroughput (runner) does. The difference is what the
// batch pays for timers, apart from the stores.
//
//	go test ./internal/batch -run '^$' -bench RunStoresChunk -count 10
func BenchmarkRunStoresChunk(b *testing.B) {
	const records, keys = 500, 400
	recs := make([]*kgo.Record, records)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "in", Offset: int64(i), Key: []byte("key-" + strconv.Itoa(i%keys)), Value: []byte("v"),
			Timestamp: time.UnixMilli(int64(1 + i))}
	}
	count := func(timer bool) transformer.Func[int] {
		return func(_ context.Context, r *transformer.Record, n int, e *transformer.Emitter[int]) error {
			n++
			e.SetState(n)
			e.Send("out", r.Key, strconv.AppendInt(nil, int64(n), 10))
			if timer {
				e.SetTimer("t", r.Timestamp.Add(time.Hour))
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name string
		st   *transformer.Stage[int]
	}{
		{"plain", transformer.New(count(false))},
		{"timers", transformer.New(count(true), transformer.StateTTL(time.Hour, transformer.EventTime),
			transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil }))},
		{"ontimer", transformer.New(count(false),
			transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil }))},
		{"ttl", transformer.New(count(false), transformer.StateTTL(time.Hour, transformer.EventTime))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tr, ok := stage.TransformerOf(tc.st)
			if !ok {
				b.Fatal("not a transformer")
			}
			p := Params{
				Transformer: tr,
				State:       func([]byte) ([]byte, bool, error) { return []byte("41"), true, nil },
				Sem:         make(chan struct{}, 64),
				Name:        "bench",
				Policy:      &Policy{},
			}
			if _, ok := tr.(process.Stores); ok {
				p.View = emptyView{}
				p.Due = func(process.TimeKind, int64, func(process.Timer) (bool, error)) error { return nil }
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				res, err := Run(ctx, p, recs)
				if err != nil || len(res.Outputs) != len(recs) {
					b.Fatalf("err %v, %d outputs", err, len(res.Outputs))
				}
			}
		})
	}
}
