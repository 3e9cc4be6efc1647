package runner

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/transformer"
)

var standbyKeys = flag.Int("standby-keys", 1_000_000, "keys of 100 bytes in the state of BenchmarkStandbyFailover's task")

// BenchmarkStandbyFailover measures the handover of one task whose store
// holds -standby-keys keys of 100-byte values, with and without a standby
// replica on the instance that takes it over: two instances, a producer
// feeding the task about 2000 records/s, then the owner stops (gracefully:
// it leaves the group at once, so no session timeout is in the figure)
// and the time is taken from the stop to the first output the new owner
// committed (read with read_committed). The new owner's restore (records
// replayed, full or warm) is read from its log. Set KAFKA_BROKERS for a
// real broker. It prints its figures; nothing is asserted about time.
//
//	go test ./runner/ -run '^$' -bench BenchmarkStandbyFailover -benchtime 1x
func BenchmarkStandbyFailover(b *testing.B) {
	for _, standby := range []bool{false, true} {
		name := "cold"
		if standby {
			name = "standby"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				failover(b, standby, *standbyKeys)
			}
		})
	}
}

func failover(b *testing.B, standby bool, keys int) {
	ctx := context.Background()
	c := kafkatest.New(b)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("failover")
	c.CreateTopic(b, in, 1)
	c.CreateTopic(b, out, 1)
	topic := changelog.Topic(app)
	writeState(b, c, app, keys)
	replicas := 0
	if standby {
		replicas = 1
	}
	start := func(id string) *standbyRun {
		proc := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
			e.SetState(n + 1)
			e.Send(out, rec.Key, []byte(id))
			return nil
		})
		l := &syncLog{}
		dir := b.TempDir()
		r, err := NewTransformer(proc, SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in),
			StateDir(dir), StandbyReplicas(replicas), SessionTimeout(6*time.Second),
			WithConsumerOpts(kgo.HeartbeatInterval(200*time.Millisecond)),
			WithLogger(slog.New(slog.NewTextHandler(l, nil))))
		require.NoError(b, err)
		rctx, cancel := context.WithCancel(ctx)
		s := &standbyRun{r: r, log: l, cancel: cancel, done: make(chan struct{}), dir: dir}
		go func() {
			s.err = r.Run(rctx)
			close(s.done)
		}()
		b.Cleanup(func() {
			cancel()
			<-s.done
		})
		return s
	}
	ready := func(s *standbyRun, what string) {
		kafkatest.WaitFor(b, 5*time.Minute, what, func() bool { return s.r.Ready() == nil })
	}
	a := start("a")
	ready(a, "a runs the task")
	bb := start("b")
	// After the rebalance one of them runs the task; the other one takes
	// it over.
	kafkatest.WaitFor(b, 5*time.Minute, "the task runs on one of the two", func() bool {
		return bb.r.Ready() == nil && a.r.Ready() == nil && stableWith(c, app, 2) && a.runs(0) != bb.runs(0)
	})
	newID := "b"
	if bb.runs(0) {
		a, bb, newID = bb, a, "a"
	}
	if !standby {
		// The new owner may have run the task before the rebalance: a
		// cold takeover must not find that store.
		removed, err := store.Prune(filepath.Join(bb.dir, app), 0)
		require.NoError(b, err)
		b.Logf("cold: removed %v", removed)
	}
	if standby {
		kafkatest.WaitFor(b, 5*time.Minute, "the standby caught up", func() bool {
			offs, _ := bb.offsets()
			end := c.EndOffsets(b, topic)[0]
			return offs[0] >= end-1
		})
	}

	// Live traffic while the handover happens.
	stopFeed := feedTask(b, c, in)
	time.Sleep(3 * time.Second)
	firstB := firstOutput(b, c, out, func(v []byte) bool { return string(v) == newID })

	before := len(bb.log.String())
	stopped := time.Now()
	a.cancel()
	<-a.done
	require.NoError(b, a.err)
	var first time.Time
	select {
	case first = <-firstB:
	case <-time.After(5 * time.Minute):
		b.Fatal("no output of b within 5 minutes of the handover")
	}
	took := first.Sub(stopped)
	stopFeed()

	rs := taskRestored(b, bb.log.String()[before:])
	if !standby {
		require.True(b, rs.full, "a cold takeover restores in full: %s", rs.line)
	}
	b.ReportMetric(took.Seconds(), "s/failover")
	b.ReportMetric(float64(rs.records), "replayed")
	fmt.Printf("standby failover bench (%s, %d keys of 100 bytes, standby %v): stop of the owner to the first committed output of the new owner %v; its restore: %s\n",
		c.Kind(), keys, standby, took.Round(time.Millisecond), rs)
}

// feedTask produces about 2000 records/s to partition 0 of in until the
// returned stop is called.
func feedTask(b *testing.B, c *kafkatest.Cluster, in string) (stop func()) {
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	require.NoError(b, err)
	var (
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; !stopped.Load(); i++ {
			<-tick.C
			for j := range 2 {
				pcl.Produce(context.Background(), &kgo.Record{Topic: in, Partition: 0, Key: fmt.Appendf(nil, "in-%d-%d", i, j)}, nil)
			}
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			stopped.Store(true)
			wg.Wait()
			pcl.Close()
		})
	}
	b.Cleanup(stop)
	return stop
}

// firstOutput reads partition 0 of out (read_committed) from its end
// offset now and sends the time the first record whose value match
// accepts arrived.
func firstOutput(b *testing.B, c *kafkatest.Cluster, out string, match func([]byte) bool) <-chan time.Time {
	ends := c.EndOffsets(b, out)
	ocl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{out: {0: kgo.NewOffset().At(ends[0])}}))
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.Cleanup(func() {
		cancel()
		<-done
		ocl.Close()
	})
	first := make(chan time.Time, 1)
	go func() {
		defer close(done)
		for {
			fs := ocl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			found := false
			fs.EachRecord(func(r *kgo.Record) { found = found || match(r.Value) })
			if found {
				first <- time.Now()
				return
			}
		}
	}()
	return first
}

// restored is a task's "task restored" log line.
type restored struct {
	line           string
	records        int
	from, to, took string
	full           bool
}

func (r restored) String() string {
	return fmt.Sprintf("replayed %d records (offsets %s..%s, full %v) in %s", r.records, r.from, r.to, r.full, r.took)
}

var restoredLine = regexp.MustCompile(`msg="task restored" partition=0 changelog=\S+ records=(\d+) from=(\d+) to=(\d+) full=(\w+)(?: reason="[^"]*")? took=(\S+)`)

// taskRestored finds the restore of task 0 in logs.
func taskRestored(b *testing.B, logs string) restored {
	m := restoredLine.FindStringSubmatch(logs)
	require.NotNil(b, m, "the restore of task 0: %s", logs)
	n, err := strconv.Atoi(m[1])
	require.NoError(b, err)
	return restored{line: m[0], records: n, from: m[2], to: m[3], full: m[4] == "true", took: m[5]}
}

// writeState writes keys keys of 100-byte values to partition 0 of app's
// changelog, as the task's producer would, and returns the value.
func writeState(b *testing.B, c *kafkatest.Cluster, app string, keys int) []byte {
	ctx := context.Background()
	topic := changelog.Topic(app)
	require.NoError(b, changelog.Ensure(ctx, c.Adm, topic, 1, -1))
	t0 := time.Now()
	p, err := txn.Open(ctx, app+"-0", time.Minute, topic, kgo.SeedBrokers(c.Brokers...), kgo.MaxBufferedRecords(50_001), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(b, err)
	defer p.Close()
	value := make([]byte, 100)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	for at := 0; at < keys; at += 50_000 {
		var recs []*kgo.Record
		for i := at; i < min(at+50_000, keys); i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "key-%09d", i), Value: value})
		}
		_, err := p.Commit(ctx, recs, nil)
		require.NoError(b, err)
	}
	b.Logf("wrote %d keys to %s/0 in %v", keys, topic, time.Since(t0).Round(time.Millisecond))
	return value
}

// BenchmarkStandbyFailoverKill is BenchmarkStandbyFailover with runner
// processes and a SIGKILL: two processes (StandbyReplicas 1 or 0) share
// one task of -standby-keys keys of 100 bytes while a producer feeds it
// about 2000 records/s; the owner is killed, and the figure is the time
// from the kill to the first output the survivor committed (read with
// read_committed), less the session timeout the group waits before it
// moves the task. Without a standby the survivor's earlier store of the
// task, if any, is pruned first, so it restores in full.
//
//	go test ./runner/ -run '^$' -bench BenchmarkStandbyFailoverKill -benchtime 1x
func BenchmarkStandbyFailoverKill(b *testing.B) {
	for _, standby := range []bool{false, true} {
		name := "cold"
		if standby {
			name = "standby"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				failoverKill(b, standby, *standbyKeys)
			}
		})
	}
}

func failoverKill(b *testing.B, standby bool, keys int) {
	c := kafkatest.New(b)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("kill")
	c.CreateTopic(b, in, 1)
	c.CreateTopic(b, out, 1)
	writeState(b, c, app, keys)
	replicas := 0
	if standby {
		replicas = 1
	}
	dir := b.TempDir()
	a := spawnChild(b, c, dir, app, in, out, replicas, "a")
	kafkatest.WaitFor(b, 5*time.Minute, "a runs the task", func() bool {
		return strings.Contains(a.logs(), `msg="task running" partition=0`)
	})
	bc := spawnChild(b, c, dir, app, in, out, replicas, "b")
	kafkatest.WaitFor(b, 5*time.Minute, "both in the group", func() bool { return stableWith(c, app, 2) })
	// The balance is sticky: a keeps the task unless it moved to b.
	owner, survivor, survivorID := a, bc, "b"
	if strings.Contains(bc.logs(), `msg="task running" partition=0`) {
		owner, survivor, survivorID = bc, a, "a"
	}
	if standby {
		kafkatest.WaitFor(b, 5*time.Minute, "the survivor's standby restored", func() bool {
			return strings.Contains(survivor.logs(), `msg="standby restored" partition=0`)
		})
	} else {
		removed, err := store.Prune(filepath.Join(survivor.dir, app), 0)
		require.NoError(b, err)
		b.Logf("cold: removed %v", removed)
	}

	stopFeed := feedTask(b, c, in)
	defer stopFeed()
	time.Sleep(3 * time.Second)
	first := firstOutput(b, c, out, func(v []byte) bool { return strings.HasSuffix(string(v), "@"+survivorID) })

	before := len(survivor.logs())
	killed := time.Now()
	require.NoError(b, owner.cmd.Process.Signal(syscall.SIGKILL))
	var at time.Time
	select {
	case at = <-first:
	case <-time.After(5 * time.Minute):
		b.Fatal("no output of the survivor within 5 minutes of the kill")
	}
	took := at.Sub(killed)
	rs := taskRestored(b, survivor.logs()[before:])
	if !standby {
		require.True(b, rs.full, "a cold takeover restores in full: %s", rs.line)
	}
	b.ReportMetric((took - childSession).Seconds(), "s/failover-less-session")
	b.ReportMetric(float64(rs.records), "replayed")
	fmt.Printf("standby SIGKILL failover bench (%s, %d keys of 100 bytes, standby %v): kill of the owner to the first committed output of the new owner %v, less the %v session timeout %v; its restore: %s\n",
		c.Kind(), keys, standby, took.Round(time.Millisecond), childSession, (took - childSession).Round(time.Millisecond), rs)
}

// stableWith reports whether group is stable with n members.
func stableWith(c *kafkatest.Cluster, group string, n int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := c.Adm.DescribeGroups(ctx, group)
	if err != nil {
		return false
	}
	g, ok := gs[group]
	return ok && g.Err == nil && g.State == "Stable" && len(g.Members) == n
}
