package transform

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// wallTimers is a process.Stores processor: a record sets its key's
// wall-clock timer "w" at the batch's Now plus the record's value in
// milliseconds; the timer's callback emits "fired@<unix ms>" to out.
type wallTimers struct{ out string }

func (wallTimers) Validate() error { return nil }
func (wallTimers) Stateful() bool  { return false }
func (wallTimers) Prepare(r *kgo.Record) (process.Input, error) {
	return process.Input{Record: r, Key: r.Key}, nil
}

func (wallTimers) Process(context.Context, process.Input, []byte, bool) (process.Result, error) {
	return process.Result{}, errors.New("Process of a Stores processor")
}
func (wallTimers) Stores() []process.StoreSpec { return nil }
func (wallTimers) Timers() bool                { return true }

func (wallTimers) ProcessState(_ context.Context, in process.Input, _ []byte, _ bool, st process.State) (process.Result, error) {
	d, err := strconv.Atoi(string(in.Record.Value))
	if err != nil {
		return process.Result{}, err
	}
	due := st.Now().UnixMilli() + int64(d)
	return process.Result{Timers: []process.TimerOp{{Timer: process.Timer{Key: in.Key, Name: "w", Kind: process.WallClock, Due: due}}}}, nil
}

func (p wallTimers) Fire(_ context.Context, tm process.Timer, _ []byte, _ bool, _ process.State) (process.Result, error) {
	return process.Result{Outputs: []*kgo.Record{{Topic: p.out, Key: tm.Key, Partition: -1,
		Value: []byte("fired@" + strconv.FormatInt(time.Now().UnixMilli(), 10))}}}, nil
}

// TestWallTimerFiresWhileIdle: a wall-clock timer of a task that gets no
// more records fires when it is due, not before and not only at a next
// record (none comes): the idle worker wakes for it (a tick) and commits
// its output. The engine created the timers changelog at start-up.
func TestWallTimerFiresWhileIdle(t *testing.T) {
	const interval = 100 * time.Millisecond
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("wall-in"), kafkatest.Name("wall-out"), kafkatest.Name("wall")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 1)

	cfg := config.Defaults(config.Transformer)
	cfg.Brokers, cfg.ApplicationID, cfg.InputTopics, cfg.StateDir = c.Brokers, app, []string{in}, t.TempDir()
	cfg.SessionTimeout, cfg.Logger = 3*time.Second, testLogger()
	cfg.CommitInterval = interval
	cfg.ConsumerOpts = []kgo.Opt{kgo.HeartbeatInterval(200 * time.Millisecond)}
	require.NoError(t, cfg.Validate(config.Transformer, true))
	cfg.EnsureLogger()
	m, err := imetrics.New(nil, app)
	require.NoError(t, err)
	cfg.Metrics = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Params{Cfg: &cfg, Proc: wallTimers{out: out}, Ops: &testOps{}}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("the engine did not stop within 60s")
		}
	})
	kafkatest.WaitFor(t, 30*time.Second, "the timers changelog created", func() bool {
		d, err := c.Adm.ListTopics(context.Background(), changelog.TimersTopic(app))
		return err == nil && d[changelog.TimersTopic(app)].Err == nil && len(d[changelog.TimersTopic(app)].Partitions) == 2
	})

	const delay = 1500 // ms
	// Taken before the produce: the batch that sets the timer may begin
	// before the produce's acknowledgement returns.
	sent := time.Now()
	c.Produce(t, &kgo.Record{Topic: in, Partition: 0, Key: []byte("k"), Value: []byte(strconv.Itoa(delay))})
	kafkatest.WaitFor(t, 30*time.Second, "offset 1 committed", func() bool { return c.CommittedOffsets(t, app, in)[0] == 1 })
	var outs []*kgo.Record
	kafkatest.WaitFor(t, 30*time.Second, "the timer's output", func() bool {
		outs = c.ReadCommitted(t, out)
		return len(outs) > 0
	})
	seen := time.Now()
	require.Len(t, outs, 1)
	at, err := strconv.ParseInt(string(outs[0].Value[len("fired@"):]), 10, 64)
	require.NoError(t, err)
	fired := time.UnixMilli(at)
	require.False(t, fired.Before(sent.Add(delay*time.Millisecond)), "not before it is due (fired %v after the produce began)", fired.Sub(sent))
	t.Logf("fired %v after the record was produced, visible %v after", fired.Sub(sent), seen.Sub(sent))
	time.Sleep(5 * interval)
	require.Len(t, c.ReadCommitted(t, out), 1, "fired once")
}

// TestStoreTopicMismatchRefused: an existing timers changelog whose
// partition count differs from the inputs' is refused at start-up with
// CHANGELOG_MISMATCH naming it, as the default changelog is; nothing
// runs.
func TestStoreTopicMismatchRefused(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("mis-in"), kafkatest.Name("mis-out"), kafkatest.Name("mis")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, changelog.Ensure(ctx, c.Adm, changelog.TimersTopic(app), 1, -1))

	cfg := config.Defaults(config.Transformer)
	cfg.Brokers, cfg.ApplicationID, cfg.InputTopics, cfg.StateDir = c.Brokers, app, []string{in}, t.TempDir()
	cfg.Logger = testLogger()
	require.NoError(t, cfg.Validate(config.Transformer, true))
	cfg.EnsureLogger()
	m, err := imetrics.New(nil, app)
	require.NoError(t, err)
	cfg.Metrics = m
	err = Run(ctx, Params{Cfg: &cfg, Proc: wallTimers{out: out}, Ops: &testOps{}})
	require.ErrorIs(t, err, flechtwerk.ErrChangelogMismatch)
	require.ErrorContains(t, err, changelog.TimersTopic(app))
}
