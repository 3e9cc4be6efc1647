package extractor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/metrics"
	"github.com/flechtwerk/flechtwerk/runner"
)

var errSourceDown = errors.New("source down")

// gatherValue returns the sum of the series of name in reg.
func gatherValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, name)
	require.NoError(t, err)
	if n == 0 {
		return 0
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return v
}

// TestQuarantineFailingConfig: the poll of config a fails after its first
// page committed; with QuarantineFailingConfigs, a is isolated (listed,
// counted) while b and c keep committing pages exactly once and Run goes
// on; a's cursor stays at its committed page. Once a's config record is
// put again (and its source recovered), a resumes from that cursor and a
// read_committed reader sees every item of every config exactly once.
func TestQuarantineFailingConfig(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	c.CreateTopic(t, out, 2)
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 20), configRec(t, cfgTopic, 0, "b", 20), configRec(t, cfgTopic, 1, "c", 20))

	var down atomic.Bool
	down.Store(true)
	var aPolls atomic.Int64
	ex := pager(out, 5, 100, func(_ context.Context, key string, cur cursor) error {
		if key == "a" && cur.Next == 5 {
			aPolls.Add(1)
			if down.Load() {
				return errSourceDown
			}
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	r, run := startRunner(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(50*time.Millisecond), runner.Metrics(reg), runner.QuarantineFailingConfigs(0))

	kafkatest.WaitFor(t, 60*time.Second, "a quarantined, b and c extracted", func() bool {
		if run.ended() {
			t.Fatalf("Run ended: %v", run.err)
		}
		got := values(c.ReadCommitted(t, out))
		return len(r.Quarantined()) == 1 && len(got["b"]) == 20 && len(got["c"]) == 20
	})
	q := r.Quarantined()
	require.Equal(t, []byte("a"), q[0].Key)
	require.ErrorIs(t, q[0].Err, errSourceDown)
	var pe *extractor.PollError
	require.ErrorAs(t, q[0].Err, &pe)
	require.True(t, q[0].Until.IsZero(), "held until its config changes")
	require.Equal(t, float64(1), gatherValue(t, reg, metrics.ExtractorQuarantined))
	require.Len(t, r.Degraded(), 1)
	require.Contains(t, r.Degraded()[0], `config "a" quarantined since`, "listed in the /readyz body")
	require.NoError(t, r.Ready(), "a quarantined config does not make the instance unready")

	// Quarantined: a is not polled again while its config is unchanged.
	polled := aPolls.Load()
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, polled, aPolls.Load(), "a quarantined config is not polled")
	c.WaitSettled(t, out)
	requireExactlyOnce(t, c.ReadCommitted(t, out), map[string]int{"a": 5, "b": 20, "c": 20})

	// The source recovers and the config is put again: a resumes at its
	// committed cursor.
	down.Store(false)
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 20))
	kafkatest.WaitFor(t, 60*time.Second, "a extracted", func() bool {
		return len(values(c.ReadCommitted(t, out))["a"]) >= 20 && len(r.Quarantined()) == 0
	})
	require.NoError(t, run.stop(t))
	c.WaitSettled(t, out)
	requireExactlyOnce(t, c.ReadCommitted(t, out), map[string]int{"a": 20, "b": 20, "c": 20})
	require.Equal(t, float64(0), gatherValue(t, reg, metrics.ExtractorQuarantined))
}

// TestQuarantineOff: by default a failed poll still ends Run (let it
// crash).
func TestQuarantineOff(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 20))
	ex := pager(out, 5, 100, func(_ context.Context, key string, cur cursor) error {
		if cur.Next == 5 {
			return errSourceDown
		}
		return nil
	})
	run := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic), runner.PollInterval(50*time.Millisecond))
	err := run.wait(t, 60*time.Second)
	require.ErrorIs(t, err, errSourceDown)
}

// TestPollRetry: a poll that fails transiently is tried again from its
// last committed cursor: the aborted page leaves nothing visible, so every
// item is seen exactly once; retries are counted; Run goes on.
func TestPollRetry(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 20), configRec(t, cfgTopic, 0, "b", 20))
	var fails atomic.Int64
	ex := pager(out, 5, 100, func(_ context.Context, key string, cur cursor) error {
		// The page's records are sent when the hook fails: they must
		// never become visible.
		if key == "a" && cur.Next == 10 && fails.Add(1) <= 3 {
			return errSourceDown
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	run := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour), runner.Metrics(reg),
		runner.PollRetry(runner.RetryPolicy{Transient: func(err error) bool { return errors.Is(err, errSourceDown) },
			MaxAttempts: 5, InitialInterval: 10 * time.Millisecond}))
	kafkatest.WaitFor(t, 60*time.Second, "a and b extracted", func() bool {
		if run.ended() {
			t.Fatalf("Run ended: %v", run.err)
		}
		got := values(c.ReadCommitted(t, out))
		return len(got["a"]) >= 20 && len(got["b"]) >= 20
	})
	require.NoError(t, run.stop(t))
	c.WaitSettled(t, out)
	requireExactlyOnce(t, c.ReadCommitted(t, out), map[string]int{"a": 20, "b": 20})
	require.Equal(t, float64(3), gatherValue(t, reg, metrics.ExtractorPollRetries))
}
