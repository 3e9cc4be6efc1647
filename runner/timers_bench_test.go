package runner

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/transformer"
)

var (
	timerBenchRecords = flag.Int("timers-records", 100_000, "records per run of BenchmarkTimersThroughput")
	timerBenchKeys    = flag.Int("timers-keys", 10_000, "keys of BenchmarkTimersThroughput")
	timerBenchCommit  = flag.Duration("timers-commit-interval", 0, "commit interval of BenchmarkTimersThroughput (0: the default)")
	timerBenchRounds  = flag.Int("timers-rounds", 3, "drains of BenchmarkTimersThroughput with and without timers each, alternating (the median counts)")
	timerBenchVariant = flag.String("timers-variant", "both", "what the timed transformer of BenchmarkTimersThroughput does: both (a timer re-armed by every record, and StateTTL), timer (the timer only), ttl (StateTTL only), once (a timer set when a key is new, and StateTTL), none (OnTimer, but no timer and no TTL: what a stage with timers pays before it sets one)")
)

// benchCounter counts per key and emits the count. With timers, by
// variant (-timers-variant): "both" sets the key's event-time timer an
// hour after each record (a timer per key, replaced by every record) and
// expires the state after an hour of event time (StateTTL); "timer" and
// "ttl" do one of the two; "once" sets the timer only when the key is new,
// with StateTTL; "none" only registers OnTimer. The bookkeeping is paid
// on every record, and nothing fires.
func benchCounter(out string, timers bool, variant string) *transformer.Stage[int] {
	fn := func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send(out, rec.Key, fmt.Appendf(nil, "%d", n))
		if timers && (variant == "both" || variant == "timer" || variant == "once" && n == 1) {
			e.SetTimer("t", rec.Timestamp.Add(time.Hour))
		}
		return nil
	}
	if !timers {
		return transformer.New(fn)
	}
	opts := []transformer.Opt{
		transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil }),
	}
	if variant != "timer" && variant != "none" {
		opts = append(opts, transformer.StateTTL(time.Hour, transformer.EventTime))
	}
	return transformer.New(fn, opts...)
}

// BenchmarkTimersThroughput measures, in one run, the records/s of a
// counting transformer with a timer per key and StateTTL against the same
// transformer without them, alternating the two (-timers-rounds runs
// each, three by default; the median counts), each on a fresh
// application over -timers-records records of -timers-keys keys on two
// partitions. The rate is taken from the first commit to the last
// (start-up excluded). It reports both rates and their ratio (target
// >= 0.8), and the ratio of the process's CPU time per record over the
// same spans (cpu-ratio), which other work on the machine moves less.
// Each drain's topics are deleted after it. Set KAFKA_BROKERS for a real
// broker;
// -timers-commit-interval sets the commit interval of both;
// -timers-variant what the timed transformer does (benchCounter).
//
//	go test ./runner/ -run '^$' -bench BenchmarkTimersThroughput -benchtime 1x
func BenchmarkTimersThroughput(b *testing.B) {
	if v := *timerBenchVariant; !slices.Contains([]string{"both", "timer", "ttl", "once", "none"}, v) {
		b.Fatalf("-timers-variant %q: want both, timer, ttl, once or none", v)
	}
	for range b.N {
		c := kafkatest.New(b)
		in := kafkatest.Name("in")
		c.CreateTopic(b, in, 2)
		n, keys := *timerBenchRecords, *timerBenchKeys
		now := time.Now()
		recs := make([]*kgo.Record, 0, n)
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: in, Partition: int32(i % 2), Key: fmt.Appendf(nil, "key-%d", i%keys),
				Value: []byte("v"), Timestamp: now.Add(time.Duration(i) * time.Millisecond)})
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
		require.NoError(b, err)
		for chunk := range slices.Chunk(recs, 10_000) {
			require.NoError(b, cl.ProduceSync(context.Background(), chunk...).FirstErr())
		}
		cl.Close()
		var rates, cpus [2][]float64
		for round := range 2 * max(*timerBenchRounds, 1) {
			timers := round%2 == 1
			rate, cpu := timersRate(b, c, in, n, timers)
			rates[round%2] = append(rates[round%2], rate)
			cpus[round%2] = append(cpus[round%2], cpu)
		}
		plain, timed := median(rates[0]), median(rates[1])
		b.ReportMetric(plain, "plain-records/s")
		b.ReportMetric(timed, "timers-records/s")
		b.ReportMetric(timed/plain, "ratio")
		fmt.Printf("timers bench (%s, %d records of %d keys, 2 partitions, variant %s): without timers %.0f records/s %v, with them %.0f records/s %v: ratio %.2f\n",
			c.Kind(), n, keys, *timerBenchVariant, plain, rates[0], timed, rates[1], timed/plain)
		if cp, ct := median(cpus[0]), median(cpus[1]); cp > 0 && ct > 0 {
			b.ReportMetric(cp/ct, "cpu-ratio")
			fmt.Printf("timers bench CPU per record (the process, broker included): without timers %.2f µs, with them %.2f µs: ratio %.2f\n", cp, ct, cp/ct)
		}
	}
}

// timersRate runs benchCounter over the n records of in on a fresh
// application and returns its records/s from its first commit to its
// last, and the process's CPU time per record meanwhile in µs (0 where it
// cannot be read). The CPU figure is less sensitive than the rate to
// other work on a shared machine.
func timersRate(b *testing.B, c *kafkatest.Cluster, in string, n int, timers bool) (float64, float64) {
	out, app := kafkatest.Name("out"), kafkatest.Name("bench")
	c.CreateTopic(b, out, 2)
	opts := []TransformerOpt{SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in),
		StateDir(b.TempDir()), SessionTimeout(6 * time.Second), WithLogger(testLogger())}
	if *timerBenchCommit > 0 {
		opts = append(opts, CommitInterval(*timerBenchCommit))
	}
	r, err := NewTransformer(benchCounter(out, timers, *timerBenchVariant), opts...)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(b, <-done)
		// The drain's topics go, so that an embedded broker's heap does
		// not grow from drain to drain and tax the later ones' GC.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		topics, err := c.Adm.ListTopics(ctx)
		require.NoError(b, err)
		del := []string{out}
		for _, t := range topics.Names() {
			if strings.HasPrefix(t, app+"-") {
				del = append(del, t)
			}
		}
		_, err = c.Adm.DeleteTopics(ctx, del...)
		require.NoError(b, err)
		runtime.GC()
	}()
	committed := func() int64 {
		var sum int64
		for _, o := range c.CommittedOffsets(b, app, in) {
			sum += o
		}
		return sum
	}
	var first int64
	var began time.Time
	var cpuBegan time.Duration
	kafkatest.WaitFor(b, 5*time.Minute, "a first commit", func() bool {
		first, began = committed(), time.Now()
		cpuBegan, _ = cpuTime()
		return first > 0
	})
	if first >= int64(n) {
		b.Fatalf("every record was committed in the first commit: raise -timers-records")
	}
	for committed() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	rate := float64(int64(n)-first) / time.Since(began).Seconds()
	cpu, ok := cpuTime()
	if !ok {
		return rate, 0
	}
	return rate, float64((cpu - cpuBegan).Microseconds()) / float64(int64(n)-first)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
