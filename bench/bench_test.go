package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

const (
	partitions = 4
	keys       = 1000
	maxPoll    = 500 // runner's default MaxPollRecords
)

// inputs returns n records over keys k0..k999, key i on partition i % 4,
// after one warm-up record per partition.
func inputs(topic string, n int) (warmup, recs []*kgo.Record) {
	for p := range int32(partitions) {
		warmup = append(warmup, &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "warmup-%d", p), Value: []byte("w")})
	}
	recs = make([]*kgo.Record, n)
	for i := range n {
		k := i % keys
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(k % partitions), Key: fmt.Appendf(nil, "k%d", k), Value: strconv.AppendInt(nil, int64(i), 10)}
	}
	return warmup, recs
}

// ends returns the committed offsets every partition must reach.
func ends(n int) map[int32]int64 {
	want := map[int32]int64{}
	for p := range int32(partitions) {
		want[p] = 1 // the warm-up record
	}
	for i := range n {
		want[int32(i%keys%partitions)]++
	}
	return want
}

func reportRate(b *testing.B) float64 {
	b.Helper()
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "records/s")
	return rate
}

// BenchmarkCounter compares the stateful exactly-once counter with the
// at-least-once baseline on the same workload; see the package doc.
func BenchmarkCounter(b *testing.B) {
	var baseline float64
	b.Run("baseline", func(b *testing.B) { baseline = benchBaseline(b) })
	b.Run("eos", func(b *testing.B) {
		rate := benchEOS(b)
		if baseline > 0 {
			b.ReportMetric(rate/baseline, "x-baseline")
		}
	})
}

func benchEOS(b *testing.B) float64 {
	c := kafkatest.New(b)
	in, out, app := kafkatest.Name("bench-in"), kafkatest.Name("bench-out"), kafkatest.Name("bench-app")
	c.CreateTopic(b, in, partitions)
	c.CreateTopic(b, out, partitions)
	warmup, recs := inputs(in, b.N)

	// gate holds the transform while the timed input is produced.
	var gate atomic.Pointer[chan struct{}]
	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		if g := gate.Load(); g != nil {
			select {
			case <-*g:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		n++
		e.SetState(n)
		e.Send(out, rec.Key, strconv.AppendInt(nil, int64(n), 10))
		return nil
	})
	r, err := runner.NewTransformer(counter,
		runner.SeedBrokers(c.Brokers...),
		runner.ApplicationID(app),
		runner.InputTopics(in),
		runner.StateDir(b.TempDir()),
		// Only for the held batch while a large input is produced.
		runner.BatchTimeout(5*time.Minute),
		runner.TransactionTimeout(10*time.Minute),
	)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(b, <-done)
		}
	}
	defer stop()

	c.Produce(b, warmup...)
	waitCommitted(b, c, app, in, ends(0), done)
	hold := make(chan struct{})
	gate.Store(&hold)
	c.Produce(b, recs...)

	b.ReportAllocs()
	b.ResetTimer()
	gate.Store(nil)
	close(hold)
	waitCommitted(b, c, app, in, ends(b.N), done)
	b.StopTimer()

	stop()
	// The offsets can be visible before the markers of their transaction
	// are written on the output.
	c.WaitSettled(b, out)
	require.Len(b, c.ReadCommitted(b, out), partitions+b.N, "one output per input")
	return reportRate(b)
}

// waitCommitted polls the group's committed offsets of topic until they
// equal want.
func waitCommitted(b *testing.B, c *kafkatest.Cluster, group, topic string, want map[int32]int64, done <-chan error) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		got := c.CommittedOffsets(b, group, topic)
		ok := true
		for p, end := range want {
			if got[p] != end {
				ok = false
			}
		}
		if ok {
			return
		}
		select {
		case err := <-done:
			b.Fatalf("runner ended while draining: %v (committed %v, want %v)", err, got, want)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("not drained after 5m: committed %v, want %v", got, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func benchBaseline(b *testing.B) float64 {
	c := kafkatest.New(b)
	in, out, group := kafkatest.Name("base-in"), kafkatest.Name("base-out"), kafkatest.Name("base-group")
	c.CreateTopic(b, in, partitions)
	c.CreateTopic(b, out, partitions)
	warmup, recs := inputs(in, b.N)

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.Brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// The runtime's output partitioner: murmur2 of the key.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	)
	require.NoError(b, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	counts := map[string]int{}
	consumed := 0
	// drain runs the loop until total records were consumed, produced and
	// committed.
	drain := func(total int) {
		for consumed < total {
			fs := cl.PollRecords(ctx, maxPoll)
			fs.EachError(func(t string, p int32, err error) { require.NoError(b, err, "fetch %s/%d", t, p) })
			recs := fs.Records()
			if len(recs) == 0 {
				continue
			}
			outs := make([]*kgo.Record, len(recs))
			for i, r := range recs {
				n := counts[string(r.Key)] + 1
				counts[string(r.Key)] = n
				outs[i] = &kgo.Record{Topic: out, Key: r.Key, Value: strconv.AppendInt(nil, int64(n), 10)}
			}
			require.NoError(b, cl.ProduceSync(ctx, outs...).FirstErr())
			require.NoError(b, commitSync(ctx, cl))
			consumed += len(recs)
		}
	}

	c.Produce(b, warmup...)
	drain(partitions)
	c.Produce(b, recs...)

	b.ReportAllocs()
	b.ResetTimer()
	drain(partitions + b.N)
	b.StopTimer()

	require.Equal(b, ends(b.N), c.CommittedOffsets(b, group, in))
	require.Len(b, c.ReadCommitted(b, out), partitions+b.N, "one output per input")
	return reportRate(b)
}

func commitSync(ctx context.Context, cl *kgo.Client) error {
	var cerr error
	cl.CommitOffsetsSync(ctx, cl.UncommittedOffsets(), func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				cerr = errors.Join(cerr, kerr.ErrorForCode(p.ErrorCode))
			}
		}
	})
	return cerr
}

func counter() *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send("out", rec.Key, strconv.AppendInt(nil, int64(n), 10))
		return nil
	})
}

// BenchmarkTransformerProcess is one engine call per record (as a task
// makes it): convert the record, decode the JSON state, run the transform,
// encode the new state.
func BenchmarkTransformerProcess(b *testing.B) {
	t, ok := stage.TransformerOf(counter())
	require.True(b, ok)
	rec := &kgo.Record{Topic: "in", Key: []byte("k1"), Value: []byte("v")}
	benchProcess(b, t, rec, func(res stage.Result) bool { return len(res.Outputs) == 1 })
}

// benchProcess makes one engine call per record on rec with state "41",
// as a task makes it, and fails unless ok accepts the result.
func benchProcess(b *testing.B, t stage.Transformer, rec *kgo.Record, ok func(stage.Result) bool) {
	ctx := context.Background()
	state := []byte("41")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		in, err := t.Prepare(rec)
		if err != nil {
			b.Fatal(err)
		}
		res, err := t.Process(ctx, in, state, true)
		if err != nil || !ok(res) {
			b.Fatal(res, err)
		}
	}
	b.StopTimer()
	reportRate(b)
}

// BenchmarkTransformerTwoOutputs is BenchmarkTransformerProcess with the
// workload of eosbench: two outputs per input, each with the input's
// header.
func BenchmarkTransformerTwoOutputs(b *testing.B) {
	t, ok := stage.TransformerOf(transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.SendRecord(transformer.Output{Topic: "out", Key: rec.Key, Value: strconv.AppendInt(nil, int64(n), 10), Headers: rec.Headers})
		e.SendRecord(transformer.Output{Topic: "out", Key: rec.Key, Value: strconv.AppendInt(nil, int64(2*n), 10), Headers: rec.Headers})
		return nil
	}))
	require.True(b, ok)
	rec := &kgo.Record{Topic: "in", Key: []byte("k1"), Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "t", Value: []byte("1764620000000000000")}}}
	benchProcess(b, t, rec, func(res stage.Result) bool { return len(res.Outputs) == 2 && len(res.Outputs[1].Headers) == 1 })
}

// BenchmarkDriver runs the counter in batches of 500 records over 1000 keys
// and 4 partitions through transformertest: the task's batch path (bucket,
// run concurrently, thread state, dedupe) on an in-memory store.
func BenchmarkDriver(b *testing.B) {
	d, err := transformertest.New(counter())
	require.NoError(b, err)
	ctx := context.Background()
	keyBytes := make([][]byte, keys)
	for k := range keyBytes {
		keyBytes[k] = fmt.Appendf(nil, "k%d", k)
	}
	batch := make([]transformertest.Input, maxPoll)
	i := 0
	b.ReportAllocs()
	b.ResetTimer()
	for n := b.N; n > 0; n -= len(batch) {
		batch = batch[:min(n, maxPoll)]
		for j := range batch {
			k := i % keys
			batch[j] = transformertest.Input{Topic: "in", Partition: int32(k % partitions), Key: keyBytes[k], Value: []byte("v")}
			i++
		}
		if _, err := d.Process(ctx, batch...); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRate(b)
}
