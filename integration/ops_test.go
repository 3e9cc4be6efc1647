package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/metrics"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// sum gathers reg and sums the values of the series of name whose labels
// include match.
func sum(t testing.TB, reg *prometheus.Registry, name string, match map[string]string) (float64, int) {
	t.Helper()
	_, ok := metrics.Lookup(name)
	require.True(t, ok, "%s is in the catalog", name)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var (
		total  float64
		series int
	)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue next
				}
			}
			series++
			total += value(m)
		}
	}
	return total, series
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// histSum gathers reg and returns the sample sum of the histogram name.
func histSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var total float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return total
}

func keyValueBytes(recs []*kgo.Record) float64 {
	n := 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value)
	}
	return float64(n)
}

// startRunner is start, returning the Runner too.
func startRunner(t testing.TB, c *kafkatest.Cluster, proc runner.Stage, opts ...runner.TransformerOpt) (*runner.Runner, *running) {
	t.Helper()
	all := append([]runner.TransformerOpt{
		runner.SeedBrokers(c.Brokers...),
		runner.SessionTimeout(6 * time.Second),
		runner.WithLogger(logger(t)),
	}, opts...)
	r, err := runner.NewTransformer(proc, all...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{cancel: cancel, done: make(chan error, 1), exited: make(chan struct{})}
	go func() {
		rn.err = r.Run(ctx)
		close(rn.exited)
		rn.done <- rn.err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rn.exited:
		case <-time.After(60 * time.Second):
			t.Error("runner did not stop within 60s")
		}
	})
	return r, rn
}

func get(t testing.TB, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// TestMetricsCount scrapes the registry after a count run: exact records
// and bytes in and out, committed transactions with a latency each, every
// record in one chunk, no aborts, lag 0, ready.
func TestMetricsCount(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions, n, keys = 4, 400, 20
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	ins := inputs(in, n, keys, partitions)
	c.Produce(t, ins...)

	reg := prometheus.NewRegistry()
	r, rn := startRunner(t, c, counter(out), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(37), runner.Metrics(reg))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	// The committed offsets are visible once the broker has written the
	// last commit's markers, which can be before the runner has its EndTxn
	// answer and counts that commit: wait for the last count of a commit.
	kafkatest.WaitFor(t, 10*time.Second, "the last commit counted", func() bool {
		recsIn, _ := sum(t, reg, metrics.RecordsIn, map[string]string{"application_id": app, "topic": in})
		recsOut, _ := sum(t, reg, metrics.RecordsOut, nil)
		writes, _ := sum(t, reg, metrics.StateWrites, nil)
		values, _ := sum(t, reg, metrics.StateValueBytes, nil)
		return recsIn == n && recsOut == n && writes > 0 && values == writes
	})
	c.WaitSettled(t, out)
	h := r.Handler(reg)

	recsIn, _ := sum(t, reg, metrics.RecordsIn, map[string]string{"application_id": app, "topic": in})
	require.Equal(t, float64(n), recsIn)
	recsOut, _ := sum(t, reg, metrics.RecordsOut, nil)
	require.Equal(t, float64(n), recsOut)
	committed, _ := sum(t, reg, metrics.TxnCommitted, nil)
	require.GreaterOrEqual(t, committed, 1.0)
	aborted, _ := sum(t, reg, metrics.TxnAborted, nil)
	require.Zero(t, aborted)
	writes, _ := sum(t, reg, metrics.StateWrites, nil)
	require.GreaterOrEqual(t, writes, float64(keys))
	inBytes, _ := sum(t, reg, metrics.InputBytes, map[string]string{"topic": in})
	require.Equal(t, keyValueBytes(ins), inBytes)
	outBytes, _ := sum(t, reg, metrics.OutputBytes, map[string]string{"topic": out})
	require.Equal(t, keyValueBytes(c.ReadCommitted(t, out)), outBytes)
	commits, _ := sum(t, reg, metrics.CommitDuration, nil)
	require.Equal(t, committed, commits, "one commit latency per transaction")
	values, _ := sum(t, reg, metrics.StateValueBytes, nil)
	require.Equal(t, writes, values, "one value size per state put")
	require.Equal(t, float64(n), histSum(t, reg, metrics.BatchRecords), "every record in one chunk")
	kafkatest.WaitFor(t, 10*time.Second, "lag 0 on every input partition", func() bool {
		lag, series := sum(t, reg, metrics.ConsumerLag, map[string]string{"topic": in})
		return series == partitions && lag == 0
	})
	entries, series := sum(t, reg, metrics.StoreEntries, nil)
	require.Equal(t, partitions, series)
	require.Equal(t, float64(keys), entries)
	running, _ := sum(t, reg, metrics.Tasks, map[string]string{"state": "running"})
	require.Equal(t, float64(partitions), running)

	s, err := r.State()
	require.NoError(t, err)
	require.Equal(t, runner.Running, s)
	code, _ := get(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code)
	code, body := get(t, h, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, metrics.TxnCommitted)

	require.NoError(t, rn.stop(t))
	s, _ = r.State()
	require.Equal(t, runner.Stopped, s)
}

// TestMetricsOffsetsOnly: intervals that wrote nothing commit their
// offsets through the group member; their input records count, no
// transaction does.
func TestMetricsOffsetsOnly(t *testing.T) {
	c := kafkatest.New(t)
	in, app := kafkatest.Name("in"), kafkatest.Name("app")
	const partitions, n = 2, 100
	c.CreateTopic(t, in, partitions)
	ins := inputs(in, n, 10, partitions)
	c.Produce(t, ins...)
	drop := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil })
	reg := prometheus.NewRegistry()
	_, rn := startRunner(t, c, drop, runner.ApplicationID(app), runner.InputTopics(in), runner.Metrics(reg))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	kafkatest.WaitFor(t, 10*time.Second, "every input counted", func() bool {
		recsIn, _ := sum(t, reg, metrics.RecordsIn, map[string]string{"topic": in})
		inBytes, _ := sum(t, reg, metrics.InputBytes, map[string]string{"topic": in})
		return recsIn == n && inBytes == keyValueBytes(ins)
	})
	committed, _ := sum(t, reg, metrics.TxnCommitted, nil)
	require.Zero(t, committed)
	_, outSeries := sum(t, reg, metrics.RecordsOut, nil)
	require.Zero(t, outSeries)
	require.NoError(t, rn.stop(t))
}

// TestMetricsDeadLetter: records the dead-letter policy handled count as
// invalid and as dead letters of their topic once committed; they are
// outputs of the transaction.
func TestMetricsDeadLetter(t *testing.T) {
	c := kafkatest.New(t)
	in, out, dlq, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("dlq"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	c.CreateTopic(t, dlq, 1)
	orderInputs(t, c, in)
	reg := prometheus.NewRegistry()
	_, rn := startRunner(t, c, orders(out), runner.ApplicationID(app), runner.InputTopics(in),
		runner.InvalidRecords(runner.DeadLetter(dlq)), runner.Metrics(reg))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	// The runner counts a commit once it has the EndTxn answer, which can
	// be after the committed offsets are visible; invalid records and dead
	// letters are counted last.
	kafkatest.WaitFor(t, 10*time.Second, "every input, invalid record and dead letter counted", func() bool {
		recsIn, _ := sum(t, reg, metrics.RecordsIn, map[string]string{"topic": in})
		invalid, _ := sum(t, reg, metrics.InvalidRecords, map[string]string{"policy": "dead-letter"})
		dead, _ := sum(t, reg, metrics.DeadLetters, map[string]string{"topic": dlq})
		return recsIn == 4 && invalid == 2 && dead == 2
	})
	c.WaitSettled(t, dlq)
	require.Len(t, c.ReadCommitted(t, dlq), 2)
	recsOut, _ := sum(t, reg, metrics.RecordsOut, nil)
	require.Equal(t, 4.0, recsOut, "two outputs and two dead letters")
	require.NoError(t, rn.stop(t))
}

// TestMetricsAbort: a transform error aborts the batch, the abort counter
// moves, and /healthz fails once Run ended with the error.
func TestMetricsAbort(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("poison")})
	proc := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		if string(rec.Value) == "poison" {
			return errPoison
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	r, rn := startRunner(t, c, proc, runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.Metrics(reg))
	h := r.Handler(reg)
	var runErr error
	select {
	case runErr = <-rn.done:
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not end with the transform error")
	}
	require.ErrorIs(t, runErr, errPoison)
	aborted, _ := sum(t, reg, metrics.TxnAborted, map[string]string{"partition": "0", "reason": "transform"})
	require.Equal(t, 1.0, aborted)
	committed, _ := sum(t, reg, metrics.TxnCommitted, nil)
	require.Zero(t, committed)

	s, err := r.State()
	require.Equal(t, runner.Failed, s)
	require.ErrorIs(t, err, errPoison)
	code, body := get(t, h, "/healthz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, errPoison.Error())
	failed, _ := sum(t, reg, metrics.RunnerState, map[string]string{"state": "failed"})
	require.Equal(t, 1.0, failed)
}

// TestReadyAfterRestore: /readyz fails while a task restores a large
// changelog, then succeeds; the restore metrics show it done.
func TestReadyAfterRestore(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, app+"-changelog")
	require.NoError(t, err)
	const n = 100_000
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: app + "-changelog", Key: []byte(fmt.Sprintf("key-%06d", i)), Value: []byte(strconv.Itoa(i))}
	}
	c.Produce(t, recs...)

	reg := prometheus.NewRegistry()
	r, rn := startRunner(t, c, counter(out), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.Metrics(reg))
	h := r.Handler(reg)
	sawRestoring := false
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := r.State()
		require.NoError(t, err)
		code, body := get(t, h, "/readyz")
		if s == runner.Restoring {
			sawRestoring = true
			require.Equal(t, http.StatusServiceUnavailable, code, body)
			require.Contains(t, body, "restoring")
			hc, _ := get(t, h, "/healthz")
			require.Equal(t, http.StatusOK, hc, "alive while restoring")
		}
		if code == http.StatusOK {
			break
		}
		require.True(t, time.Now().Before(deadline), "not ready after 60s (state %s)", s)
		time.Sleep(time.Millisecond)
	}
	require.True(t, sawRestoring, "the restore was observed")
	restored, _ := sum(t, reg, metrics.RestoreRecords, map[string]string{"partition": "0"})
	require.Equal(t, float64(n), restored)
	progress, _ := sum(t, reg, metrics.RestoreProgress, map[string]string{"partition": "0"})
	require.Equal(t, 1.0, progress)
	entries, _ := sum(t, reg, metrics.StoreEntries, map[string]string{"partition": "0"})
	require.Equal(t, float64(n), entries)
	require.NoError(t, rn.stop(t))
}

// TestQueryCommittedOnly: a query returns the committed state of a key,
// not the state an open transaction wrote.
func TestQueryCommittedOnly(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	blocked, release := make(chan struct{}), make(chan struct{})
	proc := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		if string(rec.Value) == "block" {
			close(blocked)
			<-release
		}
		return nil
	})
	r, rn := startRunner(t, c, proc, runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()))
	c.Produce(t, &kgo.Record{Topic: in, Key: []byte("a"), Value: []byte("x")})
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)

	ctx := context.Background()
	// The committed offsets can be visible before the runner has the EndTxn
	// answer and applies the transaction's state to its store.
	waitState(t, r, "a", "1")
	v, found, err := r.Get(ctx, 0, []byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "1", string(v))

	c.Produce(t, &kgo.Record{Topic: in, Key: []byte("a"), Value: []byte("block")})
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("the second record was not processed")
	}
	// The transform set the state to 2 and has not returned: the batch's
	// transaction is open.
	v, found, err = r.Get(ctx, 0, []byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "1", string(v), "the open transaction's write is not visible")
	_, found, err = r.Get(ctx, 0, []byte("missing"))
	require.NoError(t, err)
	require.False(t, found)
	close(release)
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	waitState(t, r, "a", "2")
	keys := 0
	require.NoError(t, r.Range(ctx, 0, func(k, v []byte) bool { keys++; return true }))
	require.Equal(t, 1, keys)
	require.NoError(t, rn.stop(t))
}

// waitState waits until task 0's committed state of key is want.
func waitState(t testing.TB, r *runner.Runner, key, want string) {
	t.Helper()
	kafkatest.WaitFor(t, 10*time.Second, fmt.Sprintf("committed state of %q is %q", key, want), func() bool {
		v, _, err := r.Get(context.Background(), 0, []byte(key))
		return err == nil && string(v) == want
	})
}

// TestQueryNotOwner: a partition another instance runs gives a
// *NotOwnerError naming that instance's advertised address.
func TestQueryNotOwner(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in)}
	a, _ := startRunner(t, c, counter(out), append(opts, runner.StateDir(t.TempDir()), runner.AdvertisedAddress("a.example:8080"))...)
	b, _ := startRunner(t, c, counter(out), append(opts, runner.StateDir(t.TempDir()), runner.AdvertisedAddress("b.example:8080"))...)
	ctx := context.Background()
	owned := func(r *runner.Runner) []int32 {
		var ps []int32
		for p := range int32(2) {
			if _, _, err := r.Get(ctx, p, []byte("k")); err == nil {
				ps = append(ps, p)
			}
		}
		return ps
	}
	kafkatest.WaitFor(t, 60*time.Second, "one task on each instance", func() bool {
		sa, _ := a.State()
		sb, _ := b.State()
		return sa == runner.Running && sb == runner.Running && len(owned(a)) == 1 && len(owned(b)) == 1
	})
	other := owned(b)[0]
	_, _, err := a.Get(ctx, other, []byte("k"))
	require.ErrorIs(t, err, runner.ErrNotOwner)
	var noe *runner.NotOwnerError
	require.True(t, errors.As(err, &noe))
	require.Equal(t, other, noe.Partition)
	require.Equal(t, "b.example:8080", noe.Addr)
	require.Contains(t, err.Error(), fmt.Sprintf("partition %d", other))
	require.Contains(t, err.Error(), "b.example:8080")
}
