package runner_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/sink"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// life is a flechtwerk.Lifecycle that logs its calls and every call of the
// stage's method, and notes a method call outside the Open..Close window.
type life struct {
	openErr, closeErr error
	writeErr          error // lifeSink's Write fails with it
	// opening, when not nil, is closed when Open begins; Open then
	// waits for openGate to close.
	opening, openGate chan struct{}

	mu             sync.Mutex
	events         []string
	opened, closed bool
	outside        []string
}

func (l *life) Open(context.Context) error {
	if l.opening != nil {
		close(l.opening)
		<-l.openGate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, "open")
	if l.openErr != nil {
		return l.openErr
	}
	l.opened = true
	return nil
}

func (l *life) Close(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, "close")
	l.closed = true
	if ctx.Err() != nil {
		return fmt.Errorf("close got a done context: %w", ctx.Err())
	}
	return l.closeErr
}

// call logs a call of the stage's method.
func (l *life) call(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.opened || l.closed {
		l.outside = append(l.outside, what)
	}
	l.events = append(l.events, what)
}

func (l *life) count(what string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e == what {
			n++
		}
	}
	return n
}

func (l *life) log() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// requireWindow checks that Open and Close ran once each, first and last,
// with every call of what in between.
func (l *life) requireWindow(t *testing.T, what string) {
	t.Helper()
	ev := l.log()
	require.NotEmpty(t, ev)
	require.Equal(t, "open", ev[0], "Open comes before the first %s", what)
	require.Equal(t, "close", ev[len(ev)-1], "Close comes after the last %s", what)
	require.Equal(t, 1, l.count("open"))
	require.Equal(t, 1, l.count("close"))
	require.Positive(t, l.count(what))
	require.Empty(t, l.outside, "calls outside the Open..Close window")
}

type lifeTransformer struct {
	*life
	out string
}

func (x lifeTransformer) Transform(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
	x.call("transform")
	out.Send(x.out, rec.Key, rec.Value)
	return nil
}

type lifePoller struct {
	*life
	out string
}

func (x lifePoller) Poll(ctx context.Context, _ extractor.Config[struct{}], cur int, out *extractor.Emitter[int]) error {
	x.call("poll")
	out.Send(x.out, []byte("k"), []byte(fmt.Sprint(cur)))
	return out.Commit(ctx, cur+1)
}

type lifeSink struct{ *life }

func (x lifeSink) Write(context.Context, []sink.Record[[]byte]) error {
	x.call("write")
	return x.writeErr
}

// lifeCase is one stage kind with a lifecycle, its topics made on c.
type lifeCase struct {
	name string
	call string // what the stage's method logs
	// stage returns the runner of the stage over l; done reports that the
	// stage did its work.
	stage func(t *testing.T, c *kafkatest.Cluster, l *life) (r *runner.Runner, done func() bool)
}

var lifeCases = []lifeCase{
	{"transformer", "transform", func(t *testing.T, c *kafkatest.Cluster, l *life) (*runner.Runner, func() bool) {
		in, out, app := kafkatest.Name("life-in"), kafkatest.Name("life-out"), kafkatest.Name("life-app")
		c.CreateTopic(t, in, 2)
		c.CreateTopic(t, out, 2)
		produceLife(t, c, in)
		r, err := runner.NewTransformer(transformer.StatelessFrom(lifeTransformer{l, out}),
			runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in))
		require.NoError(t, err)
		return r,
			func() bool {
				com := c.CommittedOffsets(t, app, in)
				return com[0] == 10 && com[1] == 10
			}
	}},
	{"extractor", "poll", func(t *testing.T, c *kafkatest.Cluster, l *life) (*runner.Runner, func() bool) {
		cfg, out, app := kafkatest.Name("life-cfg"), kafkatest.Name("life-out"), kafkatest.Name("life-app")
		c.CreateTopic(t, cfg, 1)
		c.CreateTopic(t, out, 1)
		c.Produce(t, &kgo.Record{Topic: cfg, Key: []byte("k"), Value: []byte("{}")})
		r, err := runner.NewExtractor(extractor.From(lifePoller{l, out}),
			runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.ConfigTopics(cfg),
			runner.PollInterval(20*time.Millisecond), runner.StateDir(t.TempDir()))
		require.NoError(t, err)
		return r,
			func() bool { return len(c.ReadCommitted(t, out)) >= 3 }
	}},
	{"sink", "write", func(t *testing.T, c *kafkatest.Cluster, l *life) (*runner.Runner, func() bool) {
		in, app := kafkatest.Name("life-in"), kafkatest.Name("life-app")
		c.CreateTopic(t, in, 2)
		produceLife(t, c, in)
		r, err := runner.NewSink(sink.New[[]byte](lifeSink{l}, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce)),
			runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in))
		require.NoError(t, err)
		return r,
			func() bool {
				com := c.CommittedOffsets(t, app, in)
				return com[0] == 10 && com[1] == 10
			}
	}},
}

// produceLife produces 10 records to each of the 2 partitions of topic.
func produceLife(t *testing.T, c *kafkatest.Cluster, topic string) {
	t.Helper()
	produceN(t, c, topic, 0, 0, 10)
	produceN(t, c, topic, 1, 10, 10)
}

// TestLifecycleWrapsRun: a stage's Lifecycle is opened once before its
// first record, poll or write, and closed once after the last, when Run
// stops gracefully.
func TestLifecycleWrapsRun(t *testing.T) {
	for _, tc := range lifeCases {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			l := &life{}
			r, done := tc.stage(t, c, l)
			stop := startRunner(t, r)
			kafkatest.WaitFor(t, 30*time.Second, tc.name+" did its work", done)
			require.NoError(t, stop())
			l.requireWindow(t, tc.call)
		})
	}
}

// TestLifecycleOpenErrorEndsRun: an Open error ends Run with a coded error
// naming the stage, before anything is consumed, polled or committed, and
// Close is not called.
func TestLifecycleOpenErrorEndsRun(t *testing.T) {
	for _, tc := range lifeCases {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			cause := errors.New("no connection pool")
			l := &life{openErr: cause}
			r, done := tc.stage(t, c, l)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := r.Run(ctx)
			require.ErrorIs(t, err, flechtwerk.ErrStageOpen)
			require.ErrorIs(t, err, cause)
			var oe *runner.OpenError
			require.ErrorAs(t, err, &oe)
			require.Contains(t, oe.Stage, "runner_test.life")
			require.Equal(t, []string{"open"}, l.log(), "nothing ran and Close was not called")
			require.False(t, done(), "nothing was committed")
		})
	}
}

// TestLifecycleCloseErrorJoinsRunError: a Close error is Run's error after
// a graceful stop.
func TestLifecycleCloseErrorJoinsRunError(t *testing.T) {
	c := kafkatest.New(t)
	cause := errors.New("pool did not drain")
	l := &life{closeErr: cause}
	tc := lifeCases[2]
	r, done := tc.stage(t, c, l)
	stop := startRunner(t, r)
	kafkatest.WaitFor(t, 30*time.Second, "the sink wrote", done)
	err := stop()
	require.ErrorIs(t, err, cause)
	require.ErrorContains(t, err, "closing stage runner_test.lifeSink")
	l.requireWindow(t, tc.call)
}

// TestLifecycleClosedWhenRunFails: when the stage fails and Run ends with
// its error, the stage is closed too, after its last call.
func TestLifecycleClosedWhenRunFails(t *testing.T) {
	c := kafkatest.New(t)
	cause := errors.New("table is gone")
	l := &life{writeErr: cause}
	tc := lifeCases[2]
	r, _ := tc.stage(t, c, l)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.ErrorIs(t, r.Run(ctx), cause)
	l.requireWindow(t, tc.call)
}

// startRunner runs r until the test ends or stop is called; stop returns
// Run's error.
func startRunner(t *testing.T, r *runner.Runner) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var res error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case res = <-done:
			case <-time.After(30 * time.Second):
				res = errors.New("Run did not return 30s after cancel")
			}
		})
		return res
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// stuckTransformer ignores its ctx and blocks until release closes.
type stuckTransformer struct {
	*life
	release chan struct{}
}

func (x stuckTransformer) Transform(context.Context, *transformer.Record, *transformer.Outputs) error {
	x.call("transform")
	<-x.release
	return nil
}

// TestLifecycleNotClosedAfterBatchTimeout: when Run ends with a batch
// timeout, the abandoned transform may still use the stage's resources,
// so Close is not called.
func TestLifecycleNotClosedAfterBatchTimeout(t *testing.T) {
	c := kafkatest.New(t)
	in, app := kafkatest.Name("life-in"), kafkatest.Name("life-app")
	c.CreateTopic(t, in, 1)
	produceN(t, c, in, 0, 0, 1)
	l := &life{}
	release := make(chan struct{})
	defer close(release)
	r, err := runner.NewTransformer(transformer.StatelessFrom(stuckTransformer{l, release}),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
		runner.BatchTimeout(500*time.Millisecond), runner.WithKafkaOpts(c.Opts()...))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrBatchTimeout)
	require.Equal(t, []string{"open", "transform"}, l.log(), "Close is not called while the transform may run")
}

// TestLifecycleExtractorReadyAfterOpen: an extractor is not ready while
// its stage opens, and is once Open returned.
func TestLifecycleExtractorReadyAfterOpen(t *testing.T) {
	c := kafkatest.New(t)
	l := &life{opening: make(chan struct{}), openGate: make(chan struct{})}
	r, done := lifeCases[1].stage(t, c, l)
	stop := startRunner(t, r)
	select {
	case <-l.opening:
	case <-time.After(30 * time.Second):
		t.Fatal("Open was not called")
	}
	require.Error(t, r.Ready(), "not ready while Open runs")
	st, _ := r.State()
	require.Equal(t, runner.Starting, st)
	close(l.openGate)
	kafkatest.WaitFor(t, 30*time.Second, "ready after Open", func() bool { return r.Ready() == nil })
	kafkatest.WaitFor(t, 30*time.Second, "the extractor polled", done)
	require.NoError(t, stop())
	l.requireWindow(t, "poll")
}
