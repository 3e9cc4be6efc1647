package runner

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/metrics"
)

// TestReadyThroughRebalance: an instance is not ready before its first
// assignment is restored, ready once it is, and stays ready (its /readyz
// answers 200 at every probe) while a second instance joins and takes
// tasks from it; the second one becomes ready in turn, and a stopped one
// is not ready.
func TestReadyThroughRebalance(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("ready-in"), kafkatest.Name("ready-out"), kafkatest.Name("ready")
	const partitions = 6
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	f := feed(t, c, in, partitions)
	defer f.finish(t)
	opts := func(name string) []TransformerOpt {
		return append(coopOpts(c.Brokers, app, in, t.TempDir(), name), WithKafkaOpts(c.Opts()...))
	}

	a, err := NewTransformer(echoCount(out), opts("a")...)
	require.NoError(t, err)
	require.ErrorContains(t, a.Ready(), "not_started")
	inst := map[string]*instance{}
	inst["a"] = startInstance(t, echoCount(out), opts("a")...)
	a = inst["a"].r
	srv := httptest.NewServer(a.Handler(nil))
	defer srv.Close()
	groupTasks(t, c, app, map[string]int{"a": partitions}, inst)
	kafkatest.WaitFor(t, 30*time.Second, "a ready", func() bool { return a.Ready() == nil })

	// Probe a's /readyz until b runs its share.
	var mu sync.Mutex
	var failed []string
	probes := 0
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			resp, err := http.Get(srv.URL + "/readyz")
			mu.Lock()
			probes++
			if err != nil {
				failed = append(failed, err.Error())
			} else {
				if resp.StatusCode != http.StatusOK {
					s, _ := a.State()
					failed = append(failed, fmt.Sprintf("%d in state %s", resp.StatusCode, s))
				}
				_ = resp.Body.Close()
			}
			mu.Unlock()
		}
	}()
	inst["b"] = startInstance(t, echoCount(out), opts("b")...)
	b := inst["b"].r
	groupTasks(t, c, app, map[string]int{"a": partitions / 2, "b": partitions / 2}, inst)
	kafkatest.WaitFor(t, 30*time.Second, "b ready", func() bool { return b.Ready() == nil })
	close(stop)
	<-done
	mu.Lock()
	require.Empty(t, failed, "a stays ready while b joins (%d probes)", probes)
	require.Greater(t, probes, 10)
	mu.Unlock()

	require.NoError(t, inst["b"].stop(t))
	require.ErrorContains(t, b.Ready(), "stopped")
	require.NoError(t, a.Ready())
}

// TestReadyStates: readiness by state, before and after the first
// assignment was served.
func TestReadyStates(t *testing.T) {
	for _, tc := range []struct {
		state  State
		served bool
		ready  bool
	}{
		{Starting, false, false},
		{Restoring, false, false},
		{Rebalancing, false, false},
		{Running, true, true},
		{Rebalancing, true, true},
		{Restoring, true, true},
		{Stopping, true, false},
		{Stopped, true, false},
		{Failed, true, false},
	} {
		t.Run(fmt.Sprintf("%s served=%v", tc.state, tc.served), func(t *testing.T) {
			r := &Runner{}
			r.ops.state, r.ops.served = tc.state, tc.served
			if tc.ready {
				require.NoError(t, r.Ready())
			} else {
				require.Error(t, r.Ready())
			}
		})
	}
}

// TestHealthyLoop: a running transformer with no records to process stays
// healthy, its main loop coming round every loopTick; a loop that did not
// come round for longer than LivenessBound makes it unhealthy, and Run's
// end makes it unhealthy with Run's outcome.
func TestHealthyLoop(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("live-in"), kafkatest.Name("live-out"), kafkatest.Name("live")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	inst := map[string]*instance{}
	inst["a"] = startInstance(t, echoCount(out), append(coopOpts(c.Brokers, app, in, t.TempDir(), "a"), WithKafkaOpts(c.Opts()...))...)
	r := inst["a"].r
	groupTasks(t, c, app, map[string]int{"a": 2}, inst)
	require.NoError(t, r.Healthy())

	first := r.ops.beat.Load()
	require.NotZero(t, first)
	kafkatest.WaitFor(t, 3*transform.LoopTick, "the idle loop comes round", func() bool { return r.ops.beat.Load() > first })
	require.NoError(t, r.Healthy())

	// A stalled loop: its last round is older than the bound.
	stalled := &Runner{}
	stalled.cfg.BatchTimeout = time.Second
	stalled.ops.state = Running
	stalled.ops.beat.Store(time.Now().Add(-stalled.LivenessBound() - time.Second).UnixNano())
	require.ErrorContains(t, stalled.Healthy(), "main loop has not come round")
	stalled.ops.beat.Store(time.Now().UnixNano())
	require.NoError(t, stalled.Healthy())

	require.NoError(t, inst["a"].stop(t))
	require.ErrorContains(t, r.Healthy(), "stopped")
	require.Zero(t, r.ops.beat.Load())
}

// TestLagEveryPartition: an instance exports the lag of every partition
// of the inputs, those of the tasks another instance runs included, so
// that lag stays visible while any instance lives.
func TestLagEveryPartition(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("lag-in"), kafkatest.Name("lag-out"), kafkatest.Name("lag")
	const partitions = 4
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	opts := func(name string) []TransformerOpt {
		return append(coopOpts(c.Brokers, app, in, t.TempDir(), name), WithKafkaOpts(c.Opts()...))
	}
	reg := prometheus.NewRegistry()
	inst := map[string]*instance{}
	inst["a"] = startInstance(t, echoCount(out), append(opts("a"), Metrics(reg))...)
	inst["b"] = startInstance(t, echoCount(out), opts("b")...)
	got := groupTasks(t, c, app, map[string]int{"a": partitions / 2, "b": partitions / 2}, inst)
	require.Len(t, inst["a"].running(), partitions/2)

	lag := func() map[int32]float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[int32]float64{}
		for _, mf := range mfs {
			if mf.GetName() != metrics.ConsumerLag {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "partition" {
						p, err := strconv.ParseInt(l.GetValue(), 10, 32)
						require.NoError(t, err)
						out[int32(p)] = m.GetGauge().GetValue()
					}
				}
			}
		}
		return out
	}
	l := lag()
	require.Len(t, l, partitions, "a exports the lag of every partition: %v", l)
	for _, p := range got["b"] {
		require.Contains(t, l, p, "a exports the lag of b's task %d", p)
	}
}
