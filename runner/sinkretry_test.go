package runner_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/metrics"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/sink"
	"github.com/flechtwerk/flechtwerk/transformer"
)

var errFlaky = errors.New("service unavailable")

func isFlaky(err error) bool { return errors.Is(err, errFlaky) }

// TestSinkRetryTransient: a Write of partition 0 that fails transiently
// three times is retried; while it fails, the partition's offset is not
// committed past the failing batch; afterwards every record is written at
// least once, the offsets reach the end, and the retries are counted.
func TestSinkRetryTransient(t *testing.T) {
	c := kafkatest.New(t)
	topic, app := kafkatest.Name("sink-retry"), kafkatest.Name("sink-retry-app")
	c.CreateTopic(t, topic, 2)
	produceN(t, c, topic, 0, 0, 20)
	produceN(t, c, topic, 1, 100, 20)

	const failures = 3
	var (
		fails     atomic.Int64
		failFirst atomic.Int64
		gate      = make(chan struct{})
		release   = make(chan struct{})
	)
	m := &memSink{hook: func(ctx context.Context, batch []sink.Record[[]byte]) error {
		if batch[0].Partition != 0 || fails.Load() >= failures {
			return nil
		}
		n := fails.Add(1)
		failFirst.Store(batch[0].Offset)
		if n == failures {
			// Hold the last failure while the test reads the group.
			close(gate)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return fmt.Errorf("write: %w", errFlaky)
	}}
	reg := prometheus.NewRegistry()
	stop := startSink(t, sink.New[[]byte](m, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic), runner.Metrics(reg),
		runner.SinkRetry(runner.RetryPolicy{Transient: isFlaky, MaxAttempts: 10, InitialInterval: 10 * time.Millisecond}))
	select {
	case <-gate:
	case <-time.After(30 * time.Second):
		t.Fatal("the sink never failed three times")
	}
	com := c.CommittedOffsets(t, app, topic)
	require.LessOrEqual(t, com[0], failFirst.Load(), "no offset of partition 0 at or past the failing batch commits while it fails")
	close(release)

	kafkatest.WaitFor(t, 30*time.Second, "committed offsets at the end", func() bool {
		com := c.CommittedOffsets(t, app, topic)
		return com[0] == 20 && com[1] == 20
	})
	require.NoError(t, stop())
	seen := map[string]bool{}
	for _, v := range m.values() {
		seen[v] = true
	}
	for i := range 20 {
		require.True(t, seen[fmt.Sprint(i)], "record %d of partition 0 written", i)
		require.True(t, seen[fmt.Sprint(100+i)], "record %d of partition 1 written", i)
	}
	require.Equal(t, float64(failures), seriesValue(t, reg, metrics.SinkRetries, topic, "0"))
	require.Equal(t, float64(failures), seriesValue(t, reg, metrics.SinkWriteErrors, topic, "0"))
	require.Equal(t, float64(20), seriesValue(t, reg, metrics.SinkCommittedOffset, topic, "0"))
}

// seriesValue returns the value of the series name{topic, partition} in
// reg.
func seriesValue(t *testing.T, reg *prometheus.Registry, name, topic, partition string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["topic"] == topic && l["partition"] == partition {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{topic=%q,partition=%q}", name, topic, partition)
	return 0
}

// TestSinkRetryPermanent: an error the classifier does not accept ends Run
// at the first attempt (let it crash), and nothing of the batch commits.
func TestSinkRetryPermanent(t *testing.T) {
	c := kafkatest.New(t)
	topic, app := kafkatest.Name("sink-perm"), kafkatest.Name("sink-perm-app")
	c.CreateTopic(t, topic, 1)
	produceN(t, c, topic, 0, 0, 5)
	boom := errors.New("constraint violated")
	var calls atomic.Int64
	m := &memSink{hook: func(context.Context, []sink.Record[[]byte]) error { calls.Add(1); return boom }}
	r, err := runner.NewSink(sink.New[[]byte](m, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic),
		runner.SinkRetry(runner.RetryPolicy{Transient: isFlaky, MaxAttempts: 5, InitialInterval: time.Millisecond}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, boom)
	var we *sink.WriteError
	require.ErrorAs(t, err, &we)
	require.Equal(t, int64(1), calls.Load(), "a non-transient error is not retried")
	require.LessOrEqual(t, c.CommittedOffsets(t, app, topic)[0], int64(0), "nothing of the batch committed")
}

// TestSinkRetryTotalTime: a Write that keeps failing transiently is tried
// again only within MaxElapsed; then its last error ends Run and nothing
// of the batch commits.
func TestSinkRetryTotalTime(t *testing.T) {
	c := kafkatest.New(t)
	topic, app := kafkatest.Name("sink-elapsed"), kafkatest.Name("sink-elapsed-app")
	c.CreateTopic(t, topic, 1)
	produceN(t, c, topic, 0, 0, 5)
	var (
		mu    sync.Mutex
		times []time.Time
	)
	m := &memSink{hook: func(context.Context, []sink.Record[[]byte]) error {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return errFlaky
	}}
	const bound = 600 * time.Millisecond
	r, err := runner.NewSink(sink.New[[]byte](m, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic),
		runner.SinkRetry(runner.RetryPolicy{Transient: isFlaky, MaxElapsed: bound,
			InitialInterval: 20 * time.Millisecond, MaxInterval: 100 * time.Millisecond}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, errFlaky)
	mu.Lock()
	defer mu.Unlock()
	require.Greater(t, len(times), 2, "retried")
	// Each wait is at least half its interval (jitter 0.5); intervals
	// start at 20 ms and grow by 1.5 up to 100 ms. The waits begun sum to
	// at most the bound, which caps the attempts whatever the timers do.
	require.LessOrEqual(t, len(times), maxAttempts(bound, 20*time.Millisecond, 100*time.Millisecond, 1.5, 0.5), "no attempt starts after MaxElapsed")
	require.LessOrEqual(t, c.CommittedOffsets(t, app, topic)[0], int64(0), "nothing of the batch committed")
}

// TestRetryOptions: invalid retry policies are coded errors of NewSink
// naming the option (PollRetry and QuarantineFailingConfigs do not
// compile for a sink: TestOptionKindsCompile).
func TestRetryOptions(t *testing.T) {
	m := &memSink{}
	snk := sink.New[[]byte](m, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce))
	base := []runner.SinkOpt{runner.SeedBrokers("localhost:1"), runner.ApplicationID("app"), runner.InputTopics("in")}
	for _, tc := range []struct {
		name  string
		opt   runner.SinkOpt
		field string
	}{
		{"no classifier", runner.SinkRetry(runner.RetryPolicy{MaxAttempts: 3}), "SinkRetry"},
		{"unbounded", runner.SinkRetry(runner.RetryPolicy{Transient: isFlaky}), "SinkRetry"},
		{"negative attempts", runner.SinkRetry(runner.RetryPolicy{Transient: isFlaky, MaxAttempts: -1}), "SinkRetry"},
		{"intervals", runner.SinkRetry(runner.RetryPolicy{Transient: isFlaky, MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: time.Millisecond}), "SinkRetry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runner.NewSink(snk, append(base, tc.opt)...)
			require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
			var ce *flechtwerk.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.field, ce.Field)
		})
	}
	_, err := runner.NewSink(snk, append(base, runner.SinkRetry(runner.RetryPolicy{Transient: isFlaky, MaxElapsed: time.Second}))...)
	require.NoError(t, err)
}

// maxAttempts is the most attempts a policy can make within bound: one,
// plus as many of the shortest possible waits as fit.
func maxAttempts(bound, initial, longest time.Duration, mult, jitter float64) int {
	n, sum, iv := 1, time.Duration(0), float64(initial)
	for {
		w := time.Duration(min(iv, float64(longest)) * (1 - jitter))
		if sum+w > bound {
			return n
		}
		sum += w
		n++
		iv *= mult
	}
}
