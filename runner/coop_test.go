package runner

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// coopChildEnv makes the test binary a child instance of
// TestIncrementalRebalances: "brokers|app|in|out|dir|name".
const coopChildEnv = "FLECHTWERK_COOP_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(coopChildEnv); spec != "" {
		os.Exit(coopChild(spec))
	}
	if spec := os.Getenv(standbyChildEnv); spec != "" {
		os.Exit(standbyChild(spec))
	}
	if spec := os.Getenv(timersChildEnv); spec != "" {
		os.Exit(timersChild(spec))
	}
	os.Exit(m.Run())
}

func coopChild(spec string) int {
	p := strings.Split(spec, "|")
	opts := coopOpts(strings.Split(p[0], ","), p[1], p[2], p[4], p[5])
	if len(p) > 6 && p[6] == "shared" {
		opts = append(opts, SharedProducer())
	}
	r, err := NewTransformer(echoCount(p[3]), opts...)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := r.Run(context.Background()); err != nil { // until killed
		fmt.Println("error:", err)
		return 1
	}
	return 0
}

func testLogger() *slog.Logger {
	if os.Getenv("FLECHTWERK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func coopOpts(brokers []string, app, in, dir, name string) []TransformerOpt {
	return []TransformerOpt{
		SeedBrokers(brokers...), ApplicationID(app), InputTopics(in), StateDir(dir),
		SessionTimeout(3 * time.Second), MaxPollRecords(50), WithLogger(testLogger()),
		// The client id names the instance in the group description.
		WithConsumerOpts(kgo.ClientID(name), kgo.HeartbeatInterval(200*time.Millisecond)),
	}
}

// echoCount counts records per state key and emits "<value>#<count>".
func echoCount(out string) *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send(out, rec.Key, fmt.Appendf(nil, "%s#%d", rec.Value, n))
		return nil
	})
}

// instance is a Runner running in this process.
type instance struct {
	r      *Runner
	cancel context.CancelFunc
	done   chan error
}

func startInstance(t *testing.T, s Stage, opts ...TransformerOpt) *instance {
	t.Helper()
	r, err := NewTransformer(s, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-in.done:
		case <-time.After(60 * time.Second):
			t.Error("runner did not stop within 60s")
		}
	})
	return in
}

func (in *instance) stop(t *testing.T) error {
	t.Helper()
	in.cancel()
	select {
	case err := <-in.done:
		in.done <- err
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("runner did not stop within 60s")
		return nil
	}
}

// running returns the tasks the instance runs (restored, fetching).
func (in *instance) running() []int32 {
	q := in.r.ops.query()
	if q == nil {
		return nil
	}
	return slices.Sorted(slices.Values(q.Stores()))
}

// feeder produces to every partition of topic continuously and keeps what
// it produced.
type feeder struct {
	mu   sync.Mutex
	recs []*kgo.Record
	stop chan struct{}
	done chan error
}

func feed(t testing.TB, c *kafkatest.Cluster, topic string, partitions int32) *feeder {
	cl, err := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers(c.Brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))...)
	require.NoError(t, err)
	f := &feeder{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer cl.Close()
		for i := 0; ; i++ {
			select {
			case <-f.stop:
				f.done <- nil
				return
			case <-time.After(20 * time.Millisecond):
			}
			var batch []*kgo.Record
			for p := range partitions {
				for j := range 2 {
					batch = append(batch, &kgo.Record{Topic: topic, Partition: p,
						Key:   fmt.Appendf(nil, "p%d-k%d", p, j),
						Value: fmt.Appendf(nil, "p%d-%d-%d", p, i, j)})
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := cl.ProduceSync(ctx, batch...).FirstErr()
			cancel()
			if err != nil {
				f.done <- err
				return
			}
			f.mu.Lock()
			f.recs = append(f.recs, batch...)
			f.mu.Unlock()
		}
	}()
	return f
}

func (f *feeder) finish(t testing.TB) []*kgo.Record {
	t.Helper()
	close(f.stop)
	require.NoError(t, <-f.done)
	return f.recs
}

// groupTasks waits until the group is stable with exactly the members of
// want (by client id), each holding want[name] tasks, and the instances of
// in running exactly what the group assigned them; it returns the tasks by
// member.
func groupTasks(t testing.TB, c *kafkatest.Cluster, app string, want map[string]int, in map[string]*instance) map[string][]int32 {
	t.Helper()
	var got map[string][]int32
	kafkatest.WaitFor(t, 60*time.Second, fmt.Sprintf("group %s stable with %v", app, want), func() bool {
		for name, i := range in {
			select {
			case err := <-i.done:
				i.done <- err
				t.Fatalf("instance %s ended: %v", name, err)
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		groups, err := c.Adm.DescribeGroups(ctx, app)
		if err != nil {
			return false
		}
		g, ok := groups[app]
		if !ok || g.Err != nil || g.State != "Stable" || len(g.Members) != len(want) {
			return false
		}
		got = map[string][]int32{}
		for _, m := range g.Members {
			a, ok := m.Assigned.AsConsumer()
			if !ok || len(a.Topics) != 1 {
				return false
			}
			got[m.ClientID] = slices.Sorted(slices.Values(a.Topics[0].Partitions))
		}
		for name, n := range want {
			if len(got[name]) != n {
				return false
			}
		}
		for name, i := range in {
			if !slices.Equal(i.running(), got[name]) {
				return false
			}
		}
		return true
	})
	return got
}

// requireUnmoved checks that every task an instance held before and after
// a step was not started again in between.
func requireUnmoved(t *testing.T, step string, before, after map[string][]int32, startsBefore map[string]map[int32]int, in map[string]*instance) {
	t.Helper()
	for name, i := range in {
		now := i.r.ops.taskStarts()
		for _, n := range before[name] {
			if slices.Contains(after[name], n) {
				require.Equal(t, startsBefore[name][n], now[n], "%s: task %d of %s stayed but was started again", step, n, name)
			}
		}
	}
}

func starts(in map[string]*instance) map[string]map[int32]int {
	out := map[string]map[int32]int{}
	for name, i := range in {
		out[name] = i.r.ops.taskStarts()
	}
	return out
}

// requireKept checks that each member of before that is in after kept
// keep of its tasks (and gained none it did not have, when gain is
// false).
func requireKept(t *testing.T, step string, before, after map[string][]int32, gain bool) {
	t.Helper()
	for name, ts := range after {
		old, ok := before[name]
		if !ok {
			continue
		}
		if gain {
			require.Subset(t, ts, old, "%s: %s lost a task", step, name)
		} else {
			require.Subset(t, old, ts, "%s: %s gained a task", step, name)
		}
	}
}

// TestIncrementalRebalances runs three instances of one application over
// 12 partitions while input is produced continuously; a fourth joins, one
// leaves gracefully and one (a child process) is killed. At every step
// only the tasks that move are started (fenced, restored) anew: a task
// that stays with its instance is never started again, and each member
// keeps its tasks as far as balance allows. At the end a read_committed
// reader sees every input's effect exactly once, with the per-key counts
// continuing across every handover.
// TestIncrementalRebalances runs in both transaction modes: in the
// shared-producer mode a revocation (a join, a graceful stop) commits the
// one transaction of all the instance's tasks before the revoked ones
// are released, and a killed instance's open transaction is never
// fenced by a transactional ID: its tasks' new owners wait for it to
// end (the broker aborts it after the transaction timeout).
func TestIncrementalRebalances(t *testing.T) {
	for _, mode := range []string{"per-task", "shared"} {
		t.Run("mode="+mode, func(t *testing.T) { testIncrementalRebalances(t, mode == "shared") })
	}
}

func testIncrementalRebalances(t *testing.T, shared bool) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("coop-in"), kafkatest.Name("coop-out"), kafkatest.Name("coop")
	const partitions = 12
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)

	f := feed(t, c, in, partitions)
	inst := map[string]*instance{}
	mode := "per-task"
	opts := func(name string) []TransformerOpt {
		o := append(coopOpts(c.Brokers, app, in, t.TempDir(), name), WithKafkaOpts(c.Opts()...))
		if shared {
			o = append(o, SharedProducer())
		}
		return o
	}
	if shared {
		mode = "shared"
	}
	inst["a"] = startInstance(t, echoCount(out), opts("a")...)
	inst["b"] = startInstance(t, echoCount(out), opts("b")...)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s|%s|%s|%s|%s", coopChildEnv, strings.Join(c.Brokers, ","), app, in, out, t.TempDir(), "c", mode))
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	require.NoError(t, child.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})

	s0 := groupTasks(t, c, app, map[string]int{"a": 4, "b": 4, "c": 4}, inst)
	st0 := starts(inst)
	t.Logf("three instances: %v", s0)

	inst["d"] = startInstance(t, echoCount(out), opts("d")...)
	s1 := groupTasks(t, c, app, map[string]int{"a": 3, "b": 3, "c": 3, "d": 3}, inst)
	t.Logf("d joined: %v", s1)
	requireKept(t, "join", s0, s1, false)
	requireUnmoved(t, "join", s0, s1, st0, inst)
	st1 := starts(inst)

	require.NoError(t, inst["b"].stop(t))
	delete(inst, "b")
	s2 := groupTasks(t, c, app, map[string]int{"a": 4, "c": 4, "d": 4}, inst)
	t.Logf("b left: %v", s2)
	requireKept(t, "leave", s1, s2, true)
	requireUnmoved(t, "leave", s1, s2, st1, inst)
	st2 := starts(inst)

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	killed = true
	s3 := groupTasks(t, c, app, map[string]int{"a": 6, "d": 6}, inst)
	t.Logf("c killed: %v", s3)
	requireKept(t, "kill", s2, s3, true)
	requireUnmoved(t, "kill", s2, s3, st2, inst)

	finishEchoExactlyOnce(t, c, f, app, in, out, inst)
}

// finishEchoExactlyOnce ends the feed, waits until the group's committed
// offsets reach the input's end (lag 0), stops every instance (each must
// end without error), waits for the output's markers and checks the output
// exactly once.
func finishEchoExactlyOnce(t *testing.T, c *kafkatest.Cluster, f *feeder, app, in, out string, inst map[string]*instance) {
	t.Helper()
	ins := f.finish(t)
	ends := c.EndOffsets(t, in)
	kafkatest.WaitFor(t, 60*time.Second, "lag 0", func() bool {
		return maps.Equal(c.CommittedOffsets(t, app, in), ends)
	})
	for name, i := range inst {
		require.NoError(t, i.stop(t), "instance %s", name)
	}
	t.Logf("%d inputs", len(ins))
	// The offsets can be visible before the markers of their transaction
	// are written on the output (EndTxn returns before them).
	c.WaitSettled(t, out)
	requireEchoExactlyOnce(t, ins, c.ReadCommitted(t, out))
}

// requireEchoExactlyOnce checks echoCount's outputs against its inputs:
// every input has exactly one output, carrying its position among the
// inputs of its key.
func requireEchoExactlyOnce(t *testing.T, ins, outs []*kgo.Record) {
	t.Helper()
	n := map[string]int{}
	want := map[string]bool{}
	for _, r := range ins {
		n[string(r.Key)]++
		want[string(r.Value)+"#"+strconv.Itoa(n[string(r.Key)])] = true
	}
	got := map[string]int{}
	for _, r := range outs {
		got[string(r.Value)]++
	}
	var missing, dup, stray []string
	for v := range want {
		if got[v] == 0 {
			missing = append(missing, v)
		}
	}
	for v, k := range got {
		if k > 1 {
			dup = append(dup, v)
		}
		if !want[v] {
			stray = append(stray, v)
		}
	}
	slices.Sort(missing)
	slices.Sort(dup)
	slices.Sort(stray)
	require.Empty(t, missing, "inputs without their output (gap)")
	require.Empty(t, dup, "outputs seen twice (duplicate)")
	require.Empty(t, stray, "outputs with a wrong count")
	require.Len(t, outs, len(ins))
}
