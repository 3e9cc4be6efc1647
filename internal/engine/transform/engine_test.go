package transform

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/config"
	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/task"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// testOps is the Ops of a test: it keeps the attached Query.
type testOps struct {
	mu sync.Mutex
	q  *Query
}

func (o *testOps) Attach(q Query) func() {
	o.mu.Lock()
	o.q = &q
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		o.q = nil
		o.mu.Unlock()
	}
}

func (o *testOps) query() *Query {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.q
}

func (*testOps) Tick()                                                       {}
func (*testOps) Rebalance(bool)                                              {}
func (*testOps) RestoreContext(ctx context.Context, _ int32) context.Context { return ctx }
func (*testOps) Started(int32)                                               {}
func (*testOps) Restarted(int32)                                             {}
func (*testOps) Tasks(_, _ map[int32]*task.Task, _ int)                      {}

func testLogger() *slog.Logger {
	if os.Getenv("FLECHTWERK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
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

// started is an engine running in a goroutine of a test.
type started struct {
	ops    *testOps
	cancel context.CancelFunc
	done   chan error
}

// start runs the engine over tr, configured as runner.New would with the
// brokers, application, input topic and state directory given; the test's
// cleanup stops it and requires a clean stop.
func start(t *testing.T, brokers []string, app, in, dir string, tr any) *started {
	t.Helper()
	c := config.Defaults(config.Transformer)
	c.Brokers, c.ApplicationID, c.InputTopics, c.StateDir = brokers, app, []string{in}, dir
	c.SessionTimeout, c.MaxPollRecords, c.Logger = 3*time.Second, 50, testLogger()
	c.ConsumerOpts = []kgo.Opt{kgo.HeartbeatInterval(200 * time.Millisecond)}
	proc, ok := stage.TransformerOf(tr)
	require.True(t, ok)
	require.NoError(t, c.Validate(config.Transformer, proc.Stateful()))
	c.EnsureLogger()
	m, err := imetrics.New(nil, app)
	require.NoError(t, err)
	c.Metrics = m
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{ops: &testOps{}, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- Run(ctx, Params{Cfg: &c, Proc: proc, Ops: s.ops}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-s.done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("the engine did not stop within 60s")
		}
	})
	return s
}
