package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
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

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// standbyChildEnv makes the test binary a runner process (see TestMain in
// coop_test.go):
// "brokers|app|in|out|stateDir|logFile|standbyReplicas|id".
const standbyChildEnv = "FLECHTWERK_STANDBY_CHILD"

// childSession is the session timeout of the child runners.
const childSession = 3 * time.Second

// standbyChild runs a counting transformer (output value "{count}@{id}")
// with standbyReplicas standby replicas until it is killed, logging to its
// log file.
func standbyChild(spec string) int {
	p := strings.Split(spec, "|")
	brokers, app, in, out, dir, logFile := p[0], p[1], p[2], p[3], p[4], p[5]
	replicas, _ := strconv.Atoi(p[6])
	id := p[7]
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send(out, rec.Key, []byte(strconv.Itoa(n)+"@"+id))
		return nil
	})
	r, err := NewTransformer(counter, SeedBrokers(strings.Split(brokers, ",")...), ApplicationID(app), InputTopics(in),
		StateDir(dir), StandbyReplicas(replicas), SessionTimeout(childSession),
		WithConsumerOpts(kgo.ClientID(childClientID(id)), kgo.HeartbeatInterval(300*time.Millisecond)),
		WithLogger(slog.New(slog.NewTextHandler(f, nil))))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := r.Run(context.Background()); err != nil {
		fmt.Fprintln(f, "run failed:", err)
		return 1
	}
	return 0
}

// TestStandbyFailoverAfterSIGKILL: two runner processes, StandbyReplicas(1),
// one task of 20 000 keys. The owner is killed (SIGKILL) while inputs keep
// coming; the survivor's standby of the task is released when the task
// moves to it, and the task's restore starts at the standby's checkpoint:
// it replays at most the standby's lag, never the partition. Every input's
// count is then exact: no gap, no duplicate, across the kill.
func TestStandbyFailoverAfterSIGKILL(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("standby-kill")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	dir := t.TempDir()
	var (
		mu       sync.Mutex
		produced int
	)
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer pcl.Close()
	produce := func(n int) {
		var recs []*kgo.Record
		mu.Lock()
		for range n {
			recs = append(recs, &kgo.Record{Topic: in, Partition: 0, Key: fmt.Appendf(nil, "k%d", produced%20000)})
			produced++
		}
		mu.Unlock()
		require.NoError(t, pcl.ProduceSync(context.Background(), recs...).FirstErr())
	}

	spawn := func(id string) *child { return spawnChild(t, c, dir, app, in, out, 1, id) }
	logOf := (*child).logs
	waitCommitted := func(what string) {
		mu.Lock()
		want := int64(produced)
		mu.Unlock()
		kafkatest.WaitFor(t, 60*time.Second, what, func() bool {
			return c.CommittedOffsets(t, app, in)[0] == want
		})
	}

	a := spawn("a")
	produce(20000)
	waitCommitted("a committed the first inputs")
	b := spawn("b")
	// One of them runs the task, the other keeps its standby.
	var owner, survivor *child
	kafkatest.WaitFor(t, 60*time.Second, "a standby restored on one of the two", func() bool {
		switch {
		case strings.Contains(logOf(b), `msg="standby restored" partition=0`):
			owner, survivor = a, b
		case strings.Contains(logOf(a), `msg="standby restored" partition=0`):
			owner, survivor = b, a
		}
		return owner != nil
	})

	// Inputs keep coming while the owner is killed.
	var stop atomic.Bool
	feeder := make(chan struct{})
	go func() {
		defer close(feeder)
		for !stop.Load() {
			produce(50)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(2 * time.Second)
	// The survivor may have run the task before the second instance
	// joined: only its log from the kill on counts.
	before := len(logOf(survivor))
	owner.kill(t)
	kafkatest.WaitFor(t, 60*time.Second, "the survivor runs the task", func() bool {
		return strings.Contains(logOf(survivor)[before:], `msg="task restored" partition=0`)
	})
	time.Sleep(time.Second)
	stop.Store(true)
	<-feeder
	waitCommitted("the survivor committed every input")

	logs := logOf(survivor)[before:]
	rel := regexp.MustCompile(`msg="standby released" partition=0 changelog=\S+ next=(\d+)`).FindStringSubmatch(logs)
	require.NotNil(t, rel, "the survivor released its standby: %s", logs)
	res := regexp.MustCompile(`msg="task restored" partition=0 changelog=\S+ records=(\d+) from=(\d+) to=(\d+) full=(\w+)`).FindStringSubmatch(logs)
	require.NotNil(t, res, logs)
	standbyAt, _ := strconv.ParseInt(rel[1], 10, 64)
	records, _ := strconv.Atoi(res[1])
	from, _ := strconv.ParseInt(res[2], 10, 64)
	to, _ := strconv.ParseInt(res[3], 10, 64)
	require.Equal(t, "false", res[4], "warm: %s", res[0])
	require.Equal(t, standbyAt, from, "the restore starts at the standby's checkpoint")
	require.LessOrEqual(t, int64(records), to-standbyAt, "at most the standby's lag is replayed")
	require.Greater(t, standbyAt, int64(20000), "the standby held the state of 20000 keys")
	t.Logf("failover after SIGKILL: the standby was at %d of %d, the new owner replayed %d records", standbyAt, to, records)

	// The offsets can be visible before the markers of their transaction
	// are written on the output (the killed owner's last transaction was
	// ended by the survivor's fence).
	c.WaitSettled(t, out)
	counts := map[string][]int{}
	for _, r := range c.ReadCommitted(t, out) {
		v, _, _ := strings.Cut(string(r.Value), "@")
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		counts[string(r.Key)] = append(counts[string(r.Key)], n)
	}
	total := 0
	for k, ns := range counts {
		for i, n := range ns {
			require.Equal(t, i+1, n, "output %d of key %s", i, k)
		}
		total += len(ns)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, produced, total, "every input exactly once")
}

// child is a runner process of standbyChild or timersChild.
type child struct {
	cmd *exec.Cmd
	log string
	dir string // its state directory
	c   *kafkatest.Cluster
	app string
	id  string
}

// childClientID is the client ID of child id's consumer, which names it in
// the group.
func childClientID(id string) string { return "child-" + id }

func spawnChild(t testing.TB, c *kafkatest.Cluster, dir, app, in, out string, replicas int, id string) *child {
	t.Helper()
	p := &child{log: filepath.Join(dir, id+".log"), dir: filepath.Join(dir, id), c: c, app: app, id: id}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), standbyChildEnv+"="+strings.Join([]string{
		strings.Join(c.Brokers, ","), app, in, out, p.dir, p.log, strconv.Itoa(replicas), id}, "|"))
	p.cmd.Stderr = os.Stderr
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	})
	return p
}

// kill SIGKILLs the child and waits for it to end. On kfake it then evicts
// the child's members from the group, as the session timeout does on
// Apache Kafka (see kafkatest.Cluster.Evict): left to kfake, a child
// killed in its JoinGroup can stay a member, holding its tasks, for ever.
// Callers must not run another child of the same id meanwhile.
func (p *child) kill(t testing.TB) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()
	if !p.c.Real {
		removed, err := p.c.Evict(context.Background(), p.app, childClientID(p.id))
		require.NoError(t, err)
		if len(removed) > 0 {
			t.Logf("evicted child %s (member %s) from the kfake group", p.id, strings.Join(removed, ", "))
		}
	}
}

func (p *child) logs() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}
