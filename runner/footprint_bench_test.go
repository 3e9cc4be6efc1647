package runner

import (
	"context"
	"flag"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

var footprintPartitions = flag.Int("footprint-partitions", 256, "input partitions of BenchmarkFootprint, all owned by its one instance")

// BenchmarkFootprint reports what one instance owning every partition of
// a -footprint-partitions input (256 by default) holds once each task has
// committed a transaction and the instance idles: its TCP connections to
// the brokers, its goroutines, and the growth of its Go heap and of the
// process's resident memory since before the runner started. In the
// default mode (mode=per-task) each task has a transactional producer of
// its own (a client with its own connections); in the shared-producer
// mode (mode=shared) the instance has one. On the embedded broker the
// broker's side of each connection lives in the same process and counts
// in the memory figures; set KAFKA_BROKERS for a broker of its own.
//
//	go test ./runner/ -run '^$' -bench Footprint -benchtime 1x
func BenchmarkFootprint(b *testing.B) {
	for _, shared := range []bool{false, true} {
		mode := "per-task"
		if shared {
			mode = "shared"
		}
		b.Run("mode="+mode, func(b *testing.B) { benchmarkFootprint(b, shared) })
	}
}

func benchmarkFootprint(b *testing.B, shared bool) {
	for range b.N {
		n := *footprintPartitions
		c := kafkatest.New(b)
		in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("footprint")
		c.CreateTopic(b, in, int32(n))
		c.CreateTopic(b, out, int32(n))
		recs := make([]*kgo.Record, n)
		for p := range recs {
			recs[p] = &kgo.Record{Topic: in, Partition: int32(p), Key: []byte(strconv.Itoa(p)), Value: []byte("v")}
		}
		cl, err := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
		require.NoError(b, err)
		require.NoError(b, cl.ProduceSync(context.Background(), recs...).FirstErr())
		cl.Close()

		before := footprintNow(c.Brokers)
		opts := []TransformerOpt{SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in),
			StateDir(b.TempDir()), SessionTimeout(6 * time.Second), WithLogger(testLogger()), WithKafkaOpts(c.Opts()...)}
		producers := fmt.Sprintf("%d tasks each with its own transactional producer", n)
		if shared {
			opts = append(opts, SharedProducer())
			producers = fmt.Sprintf("%d tasks sharing one transactional producer", n)
		}
		r, err := NewTransformer(benchCounter(out, false, ""), opts...)
		require.NoError(b, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		kafkatest.WaitFor(b, 5*time.Minute, "a commit of every task", func() bool {
			committed := 0
			for _, o := range c.CommittedOffsets(b, app, in) {
				if o >= 1 {
					committed++
				}
			}
			return committed == n
		})
		// Let the commit that follows settle before counting.
		time.Sleep(2 * time.Second)
		after := footprintNow(c.Brokers)
		cancel()
		require.NoError(b, <-done)

		conns := after.conns - before.conns
		b.ReportMetric(float64(n), "tasks")
		b.ReportMetric(float64(conns), "connections")
		b.ReportMetric(float64(after.goroutines-before.goroutines), "goroutines")
		b.ReportMetric(float64(after.heap-before.heap)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(after.rss-before.rss)/(1<<20), "rss-MiB")
		fmt.Printf("footprint (%s, one instance, %d partitions, %s): %d connections to the brokers, %d goroutines, heap +%.1f MiB, RSS +%.1f MiB\n",
			c.Kind(), n, producers, conns, after.goroutines-before.goroutines,
			float64(after.heap-before.heap)/(1<<20), float64(after.rss-before.rss)/(1<<20))
	}
}

// footprint is what the process holds at one moment (footprintNow).
type footprint struct {
	conns      int   // established TCP connections of the process to the brokers (-1: unknown)
	goroutines int   // live goroutines
	heap       int64 // bytes of the Go heap in use, after a GC
	rss        int64 // resident memory of the process (0: unknown)
}

func footprintNow(brokers []string) footprint {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	ports := map[int]bool{}
	for _, a := range brokers {
		if _, p, err := net.SplitHostPort(a); err == nil {
			if n, err := strconv.Atoi(p); err == nil {
				ports[n] = true
			}
		}
	}
	return footprint{conns: processConns(ports), goroutines: runtime.NumGoroutine(), heap: int64(ms.HeapInuse), rss: processRSS()}
}
