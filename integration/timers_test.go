package integration

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// timerProcessor is a process.Stores processor of its own: every record
// writes its value to the named store "seen" under its key and sets the
// key's event-time timer "t" due 100ms after the record; a timer that
// fires counts in the key's state and emits the count to out.
type timerProcessor struct{ out string }

func (timerProcessor) Validate() error { return nil }
func (timerProcessor) Stateful() bool  { return true }
func (timerProcessor) Prepare(r *kgo.Record) (process.Input, error) {
	return process.Input{Record: r, Key: r.Key}, nil
}

func (timerProcessor) Process(context.Context, process.Input, []byte, bool) (process.Result, error) {
	return process.Result{}, fmt.Errorf("Process of a Stores processor")
}
func (timerProcessor) Stores() []process.StoreSpec { return []process.StoreSpec{{Name: "seen"}} }
func (timerProcessor) Timers() bool                { return true }

func (timerProcessor) ProcessState(_ context.Context, in process.Input, _ []byte, _ bool, _ process.State) (process.Result, error) {
	return process.Result{
		Writes: []process.StoreWrite{{Store: 0, Key: in.Key, Value: in.Record.Value}},
		Timers: []process.TimerOp{{Timer: process.Timer{Key: in.Key, Name: "t", Kind: process.EventTime, Due: in.Record.Timestamp.UnixMilli() + 100}}},
	}, nil
}

func (p timerProcessor) Fire(_ context.Context, tm process.Timer, state []byte, found bool, _ process.State) (process.Result, error) {
	n := 0
	if found {
		n, _ = strconv.Atoi(string(state))
	}
	n++
	v := []byte(strconv.Itoa(n))
	return process.Result{Op: process.Put, State: v,
		Outputs: []*kgo.Record{{Topic: p.out, Key: tm.Key, Value: v, Partition: -1}}}, nil
}

// timerRecords returns records of keys k{first}..k{first+n-1} of topic at
// time at.
func timerRecords(topic string, first, n int, at time.Time) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "k%d", first+i), Value: fmt.Appendf(nil, "v%d", first+i), Timestamp: at}
	}
	return recs
}

func dueTimers(t *testing.T, st *store.Store) []string {
	t.Helper()
	var got []string
	require.NoError(t, st.Due(uint8(process.EventTime), math.MaxInt64, func(key []byte, name string, due int64) (bool, error) {
		got = append(got, fmt.Sprintf("%s/%s@%d", key, name, due))
		return true, nil
	}))
	return got
}

// TestTimersKilledBetweenFiringAndCommit: a task fires the timers of ten
// keys in an open transaction and is killed before the commit (the next
// owner, on another machine, fences it). The next owner restores the
// timers, the named store and the stream time from their changelogs, fires
// the same ten timers again and commits: a read_committed reader sees
// each timer's output exactly once, the fired timers are gone from the
// timer store and changelog, and a warm restart of the next owner's stores
// finds the same timers, store contents and stream time.
func TestTimersKilledBetweenFiringAndCommit(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("timers")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for _, topic := range []string{changelog.Topic(app), changelog.StoreTopic(app, "seen"), changelog.TimersTopic(app)} {
		require.NoError(t, changelog.Ensure(ctx, c.Adm, topic, 1, -1))
	}
	details, err := c.Adm.ListTopics(ctx, in)
	require.NoError(t, err)
	t0 := time.UnixMilli(1_700_000_000_000)
	first := timerRecords(in, 0, 10, t0)
	second := timerRecords(in, 10, 10, t0.Add(200*time.Millisecond))
	c.Produce(t, append(append([]*kgo.Record{}, first...), second...)...)
	recs := c.ReadCommitted(t, in) // with their offsets
	require.Len(t, recs, 20)
	first, second = recs[:10], recs[10:]
	member := c.JoinGroup(t, app, in)
	sem := make(chan struct{}, 4)
	startTask := func(dir string) *task.Task {
		tk, err := task.Start(ctx, task.Config{
			ApplicationID:      app,
			Partition:          0,
			InputTopics:        []string{in},
			TopicIDs:           map[string][16]byte{in: details[in].ID},
			Changelog:          changelog.Topic(app),
			StateDir:           dir,
			TransactionTimeout: 30 * time.Second,
			KafkaOpts:          []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
			Member:             member.Identity,
			Logger:             logger(t),
		}, timerProcessor{out: out})
		require.NoError(t, err)
		require.NoError(t, tk.Restore(ctx, c.Adm))
		return tk
	}
	run := func(tk *task.Task, recs []*kgo.Record) *task.Batch {
		b, err := tk.Process(ctx, recs, sem)
		require.NoError(t, err)
		require.NoError(t, tk.Add(ctx, b))
		return b
	}

	a := startTask(t.TempDir())
	require.Zero(t, run(a, first).Fired(), "stream time %d is before every due time", a.StreamTime())
	_, err = a.CommitOpen(ctx)
	require.NoError(t, err)
	require.Equal(t, t0.UnixMilli(), a.StreamTime())
	require.Equal(t, 10, run(a, second).Fired(), "stream time passed the first ten timers")
	// Killed here: the transaction with the fired timers' outputs is open.

	dirB := t.TempDir()
	b := startTask(dirB) // fences a
	defer a.Close()
	require.Equal(t, t0.UnixMilli(), b.StreamTime(), "the stream time restored from the timers changelog")
	require.Len(t, dueTimers(t, b.TimerStore()), 10, "the timers restored")
	require.Equal(t, 10, run(b, second).Fired())
	_, err = b.CommitOpen(ctx)
	require.NoError(t, err)

	// The markers of a transaction may be written after EndTxn answered.
	c.WaitSettled(t, out)
	c.WaitSettled(t, changelog.TimersTopic(app))
	outs := c.ReadCommitted(t, out)
	if len(outs) != 10 {
		t.Fatalf("each fired timer's output exactly once: read %d; the topic:\n%s", len(outs), c.Dump(t, out))
	}
	for i, o := range outs {
		require.Equal(t, fmt.Sprintf("k%d", i), string(o.Key))
		require.Equal(t, "1", string(o.Value))
	}
	wantTimers := make([]string, 0, 10)
	for i := 10; i < 20; i++ {
		wantTimers = append(wantTimers, fmt.Sprintf("k%d/t@%d", i, t0.UnixMilli()+300))
	}
	require.Equal(t, wantTimers, dueTimers(t, b.TimerStore()), "fired timers removed, the new ones set")
	require.Equal(t, t0.UnixMilli()+200, b.StreamTime())
	seen := contents(t, b.NamedStore("seen"))
	require.Len(t, seen, 20)
	counts := contents(t, b.Store())
	require.Len(t, counts, 10)
	require.Equal(t, "1", counts["k3"])
	// The timers changelog holds the fired timers' tombstones.
	tombs := map[string]bool{}
	for _, r := range c.ReadCommitted(t, changelog.TimersTopic(app)) {
		if key, name, ok := store.DecodeTimerKey(r.Key); ok {
			tombs[string(key)+"/"+name] = r.Value == nil
		}
	}
	require.True(t, tombs["k0/t"], "k0's timer fired: a tombstone")
	require.False(t, tombs["k10/t"], "k10's timer is set")
	require.NoError(t, b.Close())

	// A warm restart of b's stores.
	w := startTask(dirB)
	defer w.Close()
	require.Equal(t, wantTimers, dueTimers(t, w.TimerStore()))
	require.Equal(t, t0.UnixMilli()+200, w.StreamTime())
	require.Equal(t, seen, contents(t, w.NamedStore("seen")))
	require.Equal(t, counts, contents(t, w.Store()))
	require.Zero(t, run(w, nil).Fired())
}
