package runner

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// timersChildEnv makes the test binary a runner process of timerStage,
// or of ttlKillStage for an id starting with "ttl" (see TestMain):
// "brokers|app|in|out|stateDir|logFile|standbyReplicas|id".
const timersChildEnv = "FLECHTWERK_TIMERS_CHILD"

// idleGap is when timerStage's "idle" timer of a key is due after the
// key's last record (event time).
const idleGap = 200 * time.Millisecond

// timerStage is timer-heavy: every record v of a key writes its state
// (unchanged) and sets three timers of the key, the event-time timer
// "e<v>" due 50ms after the record, the wall-clock timer "w<v>" due up to
// 200ms after the batch, and moves the event-time timer "idle" to idleGap
// after the record (a session timeout, carried by the key's state). A
// timer that fires counts in its key's state and emits "<count>|<timer
// name>", the idle timer "<count>|idle@<due ms>". A record of value
// "flush" does nothing.
func timerStage(out string) *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		v := string(rec.Value)
		if v == "flush" {
			return nil
		}
		i, _ := strconv.Atoi(v)
		e.SetState(n)
		e.SetTimer("e"+v, rec.Timestamp.Add(50*time.Millisecond))
		e.SetWallTimer("w"+v, e.Now().Add(time.Duration(i*37%200)*time.Millisecond))
		e.SetTimer("idle", rec.Timestamp.Add(idleGap))
		return nil
	}, transformer.OnTimer(func(_ context.Context, tm transformer.Timer, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		name := tm.Name
		if name == "idle" {
			name = fmt.Sprintf("idle@%d", tm.Due.UnixMilli())
		}
		e.Send(out, tm.Key, fmt.Appendf(nil, "%d|%s", n, name))
		return nil
	}))
}

func timersChild(spec string) int {
	p := strings.Split(spec, "|")
	brokers, app, in, out, dir, logFile := p[0], p[1], p[2], p[3], p[4], p[5]
	replicas, _ := strconv.Atoi(p[6])
	id := p[7]
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stage := timerStage(out)
	if strings.HasPrefix(id, "ttl") {
		stage = ttlKillStage(out)
	}
	r, err := NewTransformer(stage, SeedBrokers(strings.Split(brokers, ",")...), ApplicationID(app), InputTopics(in),
		StateDir(dir), StandbyReplicas(replicas), SessionTimeout(childSession), CommitInterval(50*time.Millisecond),
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

func spawnTimersChild(t *testing.T, c *kafkatest.Cluster, dir, app, in, out string, replicas int, id string) *child {
	t.Helper()
	p := &child{log: filepath.Join(dir, id+".log"), dir: filepath.Join(dir, id), c: c, app: app, id: id}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), timersChildEnv+"="+strings.Join([]string{
		strings.Join(c.Brokers, ","), app, in, out, p.dir, p.log, strconv.Itoa(replicas), id}, "|"))
	p.cmd.Stderr = os.Stderr
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	})
	return p
}

// timerInputs produces records of keys k0..k29 to both partitions of in,
// with increasing values, stamped now; ts holds the timestamps of each
// key's records (Unix ms), in order.
type timerInputs struct {
	mu   sync.Mutex
	n    int
	ts   map[string][]int64
	cl   *kgo.Client
	in   string
	stop atomic.Bool
	done chan struct{}
}

func (ti *timerInputs) produce(t *testing.T, n int) {
	var recs []*kgo.Record
	ti.mu.Lock()
	for range n {
		k := ti.n % 30
		r := &kgo.Record{Topic: ti.in, Partition: int32(k % 2), Key: fmt.Appendf(nil, "k%d", k),
			Value: []byte(strconv.Itoa(ti.n)), Timestamp: time.UnixMilli(time.Now().UnixMilli())}
		recs = append(recs, r)
		if ti.ts == nil {
			ti.ts = map[string][]int64{}
		}
		ti.ts[string(r.Key)] = append(ti.ts[string(r.Key)], r.Timestamp.UnixMilli())
		ti.n++
	}
	ti.mu.Unlock()
	require.NoError(t, ti.cl.ProduceSync(context.Background(), recs...).FirstErr())
}

func (ti *timerInputs) run(t *testing.T) {
	ti.done = make(chan struct{})
	go func() {
		defer close(ti.done)
		for !ti.stop.Load() {
			ti.produce(t, 10)
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// timersDone reports whether the outputs of timerStage hold every timer
// of the n inputs whose timestamps by key are ts: 2n, and an idle timer
// per key due idleGap after its last record.
func timersDone(outs []*kgo.Record, n int, ts map[string][]int64) bool {
	last := map[string]bool{}
	e, w := 0, 0
	for _, o := range outs {
		_, name, _ := strings.Cut(string(o.Value), "|")
		switch {
		case strings.HasPrefix(name, "idle@"):
			d, _ := strconv.ParseInt(name[len("idle@"):], 10, 64)
			if k := ts[string(o.Key)]; len(k) > 0 && d == k[len(k)-1]+idleGap.Milliseconds() {
				last[string(o.Key)] = true
			}
		case strings.HasPrefix(name, "e"):
			e++
		default:
			w++
		}
	}
	return e >= n && w >= n && len(last) == len(ts)
}

// requireTimersOnce checks the outputs of timerStage for n inputs whose
// timestamps by key are ts: every input's e and w timers fired exactly
// once; each key's idle timer fired only where no record of the key
// moved it (none in the idleGap before its due time), and once after the
// key's last record; and each key's counts run 1, 2, ... without gap or
// repeat (the state written by the callbacks is that of the committed
// fires, never of an aborted one).
func requireTimersOnce(t *testing.T, outs []*kgo.Record, n int, ts map[string][]int64) {
	t.Helper()
	fired := map[string]int{}
	counts := map[string]int{}
	idles := 0
	for _, o := range outs {
		c, name, ok := strings.Cut(string(o.Value), "|")
		require.True(t, ok, "%q", o.Value)
		cnt, err := strconv.Atoi(c)
		require.NoError(t, err)
		counts[string(o.Key)]++
		require.Equal(t, counts[string(o.Key)], cnt, "count of key %s at timer %s", o.Key, name)
		if d, ok := strings.CutPrefix(name, "idle@"); !ok {
			fired[name]++
		} else {
			fired[string(o.Key)+"/"+name]++ // keys share due times
			idles++
			due, err := strconv.ParseInt(d, 10, 64)
			require.NoError(t, err)
			for _, at := range ts[string(o.Key)] {
				require.False(t, at > due-idleGap.Milliseconds() && at < due,
					"idle timer of key %s fired due %d, but its record at %d moved it to %d", o.Key, due, at, at+idleGap.Milliseconds())
			}
		}
	}
	for i := range n {
		for _, name := range []string{"e" + strconv.Itoa(i), "w" + strconv.Itoa(i)} {
			require.Equal(t, 1, fired[name], "timer %s fired once", name)
		}
	}
	for k, at := range ts {
		name := fmt.Sprintf("idle@%d", at[len(at)-1]+idleGap.Milliseconds())
		require.Equal(t, 1, fired[k+"/"+name], "key %s: idle timer after its last record fired once", k)
	}
	require.Len(t, outs, 2*n+idles)
}

// TestTimersChaosKill: runner processes of a timer-heavy transformer
// (two timers per record, event time and wall clock, state written by
// every callback) are SIGKILLed at random moments while records keep
// coming, so that kills land between timers firing and their commit. The
// replacement restarts warm (same state directory) or on another machine
// (a full restore of the stores, the timers and the stream time). At the
// end, a read_committed reader sees every timer's output exactly once and
// the counts of every key without gap or repeat.
func TestTimersChaosKill(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("timers-kill")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	dir := t.TempDir()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer pcl.Close()
	ti := &timerInputs{cl: pcl, in: in}
	ti.run(t)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 25))
	const kills = 4
	for i := range kills {
		id := []string{"a", "b"}[i%2] // alternately warm and on the other machine
		if i >= 2 {
			id = "a" // a warm restart
		}
		p := spawnTimersChild(t, c, dir, app, in, out, 0, id)
		kafkatest.WaitFor(t, 60*time.Second, "the child restored its tasks", func() bool {
			return strings.Count(p.logs(), `msg="task restored"`) >= 2*2 // 2 tasks, 2 stores each (state, timers)
		})
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		p.kill(t)
		t.Logf("kill %d of child %s", i+1, id)
	}
	p := spawnTimersChild(t, c, dir, app, in, out, 0, "b")
	time.Sleep(time.Second)
	ti.stop.Store(true)
	<-ti.done
	// Stream time past every event-time timer of both partitions.
	require.NoError(t, pcl.ProduceSync(context.Background(),
		&kgo.Record{Topic: in, Partition: 0, Key: []byte("flush"), Value: []byte("flush"), Timestamp: time.Now().Add(time.Hour)},
		&kgo.Record{Topic: in, Partition: 1, Key: []byte("flush"), Value: []byte("flush"), Timestamp: time.Now().Add(time.Hour)},
	).FirstErr())
	ti.mu.Lock()
	n, ts := ti.n, ti.ts
	ti.mu.Unlock()
	var outs []*kgo.Record
	kafkatest.WaitForState(t, 120*time.Second, "every timer fired", func() bool {
		outs = c.ReadCommitted(t, out)
		return timersDone(outs, n, ts)
	}, func() string {
		return fmt.Sprintf("%d outputs for %d inputs; child log:\n%s", len(outs), n, lastLines(p.logs(), 20))
	})
	time.Sleep(500 * time.Millisecond) // nothing more comes
	outs = c.ReadCommitted(t, out)
	requireTimersOnce(t, outs, n, ts)
	// The idle timer rides on its key's state: the timer changelog gets
	// a record of it when it moves on from an earlier due time, not one
	// per record or transaction.
	idle := map[string]int{}
	for _, r := range c.ReadCommitted(t, changelog.TimersTopic(app)) {
		if key, name, ok := store.DecodeTimerKey(r.Key); ok && name == "idle" && r.Value != nil {
			idle[string(key)]++
		}
	}
	for k, at := range ts {
		require.Greater(t, idle[k], 1, "key %s: the idle timer moved on", k)
		require.Less(t, idle[k], len(at)/2, "key %s: %d idle timer records for %d records", k, idle[k], len(at))
	}
	t.Logf("%d inputs, %d timers fired exactly once across %d kills; idle timer records of k0: %d for %d records", n, len(outs), kills, idle["k0"], len(ts["k0"]))
}

// TestTimersStandbyFailover: two runner processes of the timer-heavy
// transformer with StandbyReplicas(1), each running one task and keeping
// the standby of the other (its default store and its timer store). One
// is SIGKILLed while records keep coming: the survivor releases its
// standby stores and restores each warm from its standby's checkpoint,
// and every timer still fires exactly once (the timers and the stream
// time the standby kept are exact).
func TestTimersStandbyFailover(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("timers-standby")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	dir := t.TempDir()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer pcl.Close()
	ti := &timerInputs{cl: pcl, in: in}
	ti.run(t)

	a := spawnTimersChild(t, c, dir, app, in, out, 1, "a")
	b := spawnTimersChild(t, c, dir, app, in, out, 1, "b")
	timers := regexp.QuoteMeta(changelog.TimersTopic(app))
	standbyOf := regexp.MustCompile(`msg="standby restored" partition=\d changelog=` + timers)
	kafkatest.WaitFor(t, 60*time.Second, "each keeps the standby of the other's task, timers included", func() bool {
		return standbyOf.MatchString(a.logs()) && standbyOf.MatchString(b.logs())
	})
	time.Sleep(2 * time.Second)
	before := len(b.logs())
	a.kill(t)
	kafkatest.WaitFor(t, 60*time.Second, "the survivor runs both tasks", func() bool {
		return strings.Count(b.logs()[before:], `msg="task restored"`) >= 2 // the default store and the timers
	})
	time.Sleep(time.Second)
	ti.stop.Store(true)
	<-ti.done
	require.NoError(t, pcl.ProduceSync(context.Background(),
		&kgo.Record{Topic: in, Partition: 0, Key: []byte("flush"), Value: []byte("flush"), Timestamp: time.Now().Add(time.Hour)},
		&kgo.Record{Topic: in, Partition: 1, Key: []byte("flush"), Value: []byte("flush"), Timestamp: time.Now().Add(time.Hour)},
	).FirstErr())
	ti.mu.Lock()
	n, ts := ti.n, ti.ts
	ti.mu.Unlock()
	var outs []*kgo.Record
	kafkatest.WaitForState(t, 120*time.Second, "every timer fired", func() bool {
		outs = c.ReadCommitted(t, out)
		return timersDone(outs, n, ts)
	}, func() string {
		return fmt.Sprintf("%d outputs for %d inputs; survivor log:\n%s", len(outs), n, lastLines(b.logs(), 20))
	})
	time.Sleep(500 * time.Millisecond)
	requireTimersOnce(t, c.ReadCommitted(t, out), n, ts)

	logs := b.logs()[before:]
	released := regexp.MustCompile(`msg="standby released" partition=\d changelog=` + timers).FindString(logs)
	require.NotEmpty(t, released, "the survivor released its timer store's standby: %s", logs)
	restored := regexp.MustCompile(`msg="task restored" partition=\d changelog=` + timers + ` records=\d+ from=\d+ to=\d+ full=(\w+)`).FindStringSubmatch(logs)
	require.NotNil(t, restored, logs)
	require.Equal(t, "false", restored[1], "the timer store restored warm from the standby: %s", restored[0])
	t.Logf("%d inputs, their timers fired exactly once; %s; %s", n, released, restored[0])
}
