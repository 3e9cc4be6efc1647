package runner_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// splitter sends each word of a sentence to topic, keyed by the word.
func splitter(topic *string) *transformer.Stage[transformer.None] {
	return transformer.Stateless(func(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
		for _, w := range strings.Fields(string(rec.Value)) {
			out.Send(*topic, []byte(w), []byte(w))
		}
		return nil
	})
}

// wordCounter counts each key and sends the running count to out.
func wordCounter(out string) *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send(out, rec.Key, []byte(strconv.Itoa(n)))
		return nil
	})
}

// runPipeline runs p until the test ends (or stop is called) and returns
// Run's result channel.
func runPipeline(t *testing.T, p *runner.Pipeline) (stop context.CancelFunc, done chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			done <- err
		case <-time.After(60 * time.Second):
			t.Error("pipeline Run did not return 60s after cancel")
		}
	})
	return cancel, done
}

// waitCommitted waits until group app committed the end offsets of topic.
func waitCommitted(t *testing.T, c *kafkatest.Cluster, app, topic string, done chan error) {
	t.Helper()
	ends := c.EndOffsets(t, topic)
	kafkatest.WaitFor(t, 60*time.Second, app+" committed "+topic, func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("pipeline Run ended: %v", err)
		default:
		}
		got := c.CommittedOffsets(t, app, topic)
		for p, end := range ends {
			if got[p] != end {
				return false
			}
		}
		return true
	})
}

// TestPipelineRepartitionWordCount runs sentences -> split (re-keys each
// word into a repartition topic) -> count in one pipeline and checks the
// repartition topic (name, partition count of the split stage's input,
// delete policy), the final counts read read_committed, the shared
// registry, and the pipeline's probes.
func TestPipelineRepartitionWordCount(t *testing.T) {
	c := kafkatest.New(t)
	in, out := kafkatest.Name("sentences"), kafkatest.Name("counts")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, in, 3)
	c.CreateTopic(t, out, 3)

	reg := prometheus.NewRegistry()
	p, err := runner.NewPipeline("wordcount", runner.SeedBrokers(c.Brokers...), runner.Metrics(reg),
		runner.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	require.NoError(t, err)
	words := p.Repartition("words", splitApp, countApp, 0)
	require.Equal(t, countApp+"-words-repartition", words)
	_, err = p.AddTransformer(splitter(&words), runner.ApplicationID(splitApp), runner.InputTopics(in))
	require.NoError(t, err)
	_, err = p.AddTransformer(wordCounter(out), runner.ApplicationID(countApp), runner.InputTopics(words),
		runner.StateDir(t.TempDir()))
	require.NoError(t, err)

	sentences := []string{"the fox and the dog", "the end", "a fox a dog a cat", "end"}
	var recs []*kgo.Record
	want := map[string]int{}
	for i, s := range sentences {
		recs = append(recs, &kgo.Record{Topic: in, Partition: int32(i % 3), Value: []byte(s)})
		for _, w := range strings.Fields(s) {
			want[w]++
		}
	}
	c.Produce(t, recs...)
	_, done := runPipeline(t, p)
	waitCommitted(t, c, splitApp, in, done)
	waitCommitted(t, c, countApp, words, done)

	got := map[string]int{}
	for _, r := range c.ReadCommitted(t, out) {
		n, err := strconv.Atoi(string(r.Value))
		require.NoError(t, err)
		got[string(r.Key)] = max(got[string(r.Key)], n)
	}
	require.Equal(t, want, got, "final counts")

	ctx := context.Background()
	details, err := c.Adm.ListTopics(ctx, words)
	require.NoError(t, err)
	require.Len(t, details[words].Partitions, 3, "sized from the split stage's input")
	cfgs, err := c.Adm.DescribeTopicConfigs(ctx, words)
	require.NoError(t, err)
	policy, err := cfgs.On(words, nil)
	require.NoError(t, err)
	found := false
	for _, kv := range policy.Configs {
		if kv.Key == "cleanup.policy" {
			found = true
			require.Equal(t, "delete", kv.MaybeValue())
		}
	}
	require.True(t, found, "cleanup.policy described")

	// Every record of a word went to the partition murmur2 gives its
	// key, so one task counted it.
	for _, r := range c.ReadCommitted(t, words) {
		want := kgo.StickyKeyPartitioner(nil).ForTopic(words).Partition(r, 3)
		require.Equal(t, int32(want), r.Partition, "partition of %s", r.Key)
	}

	kafkatest.WaitFor(t, 30*time.Second, "the pipeline ready", func() bool { return p.Ready() == nil })
	require.NoError(t, p.Healthy())
	srv := httptest.NewServer(p.Handler(reg))
	defer srv.Close()
	body := get(t, srv.URL+"/readyz", 200)
	require.Contains(t, body, splitApp+": ok")
	require.Contains(t, body, countApp+": ok")
	metrics := get(t, srv.URL+"/metrics", 200)
	require.Contains(t, metrics, `application_id="`+splitApp+`"`)
	require.Contains(t, metrics, `application_id="`+countApp+`"`)
}

func get(t *testing.T, url string, status int) string {
	t.Helper()
	r, err := http.Get(url)
	require.NoError(t, err)
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	require.Equal(t, status, r.StatusCode, "GET %s: %s", url, b)
	return string(b)
}

// TestPipelineSlowStageDoesNotStallOthers blocks one stage inside its
// transform and checks that another stage of the pipeline still commits
// its input, while the blocked stage commits nothing.
func TestPipelineSlowStageDoesNotStallOthers(t *testing.T) {
	c := kafkatest.New(t)
	inA, inB, out := kafkatest.Name("in-a"), kafkatest.Name("in-b"), kafkatest.Name("out")
	appA, appB := kafkatest.Name("slow"), kafkatest.Name("fast")
	for _, tp := range []string{inA, inB, out} {
		c.CreateTopic(t, tp, 2)
	}
	release := make(chan struct{})
	var entered atomic.Bool
	slow := transformer.Stateless(func(ctx context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		entered.Store(true)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		o.Send(out, rec.Key, rec.Value)
		return nil
	})
	p, err := runner.NewPipeline("slow-fast", runner.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	_, err = p.AddTransformer(slow, runner.ApplicationID(appA), runner.InputTopics(inA), runner.BatchTimeout(50*time.Second))
	require.NoError(t, err)
	_, err = p.AddTransformer(wordCounter(out), runner.ApplicationID(appB), runner.InputTopics(inB), runner.StateDir(t.TempDir()))
	require.NoError(t, err)
	c.Produce(t, &kgo.Record{Topic: inA, Partition: 0, Key: []byte("a"), Value: []byte("a")})
	stop, done := runPipeline(t, p)
	kafkatest.WaitFor(t, 30*time.Second, "the slow stage blocked in its transform", entered.Load)

	for i := range 3 {
		var recs []*kgo.Record
		for j := range 20 {
			recs = append(recs, &kgo.Record{Topic: inB, Partition: int32(j % 2), Key: []byte("k" + strconv.Itoa(j%5)), Value: []byte(strconv.Itoa(i))})
		}
		c.Produce(t, recs...)
		waitCommitted(t, c, appB, inB, done)
	}
	require.Len(t, c.ReadCommitted(t, out), 60, "the fast stage's outputs, committed while the slow one blocks")
	require.Zero(t, c.CommittedOffsets(t, appA, inA)[0], "the slow stage committed nothing")

	close(release)
	waitCommitted(t, c, appA, inA, done)
	stop()
	require.NoError(t, <-done)
	done <- nil
}

// TestPipelineStageErrorEndsRun fails one stage and checks that Run ends
// with a *StageError naming it, and that the other stage stopped
// gracefully: its work, held in a transaction open for a long commit
// interval, was committed by the stop.
func TestPipelineStageErrorEndsRun(t *testing.T) {
	c := kafkatest.New(t)
	inA, inB, out := kafkatest.Name("in-a"), kafkatest.Name("in-b"), kafkatest.Name("out")
	appA, appB := kafkatest.Name("good"), kafkatest.Name("bad")
	for _, tp := range []string{inA, inB, out} {
		c.CreateTopic(t, tp, 1)
	}
	var processed atomic.Int64
	good := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		o.Send(out, rec.Key, rec.Value)
		processed.Add(1)
		return nil
	})
	boom := errors.New("boom")
	bad := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return boom })
	p, err := runner.NewPipeline("fails", runner.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	_, err = p.AddTransformer(good, runner.ApplicationID(appA), runner.InputTopics(inA), runner.CommitInterval(time.Minute),
		runner.TransactionTimeout(2*time.Minute))
	require.NoError(t, err)
	_, err = p.AddTransformer(bad, runner.ApplicationID(appB), runner.InputTopics(inB))
	require.NoError(t, err)
	for i := range 10 {
		c.Produce(t, &kgo.Record{Topic: inA, Key: []byte("k"), Value: []byte(strconv.Itoa(i))})
	}
	_, done := runPipeline(t, p)
	kafkatest.WaitFor(t, 30*time.Second, "the good stage processed its input", func() bool { return processed.Load() == 10 })
	require.Zero(t, c.CommittedOffsets(t, appA, inA)[0], "nothing committed before the interval ends")

	c.Produce(t, &kgo.Record{Topic: inB, Key: []byte("x"), Value: []byte("x")})
	var runErr error
	select {
	case runErr = <-done:
		done <- runErr
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not end after a stage failed")
	}
	require.ErrorIs(t, runErr, boom)
	se, ok := errors.AsType[*runner.StageError](runErr)
	require.True(t, ok, "a *StageError: %v", runErr)
	require.Equal(t, appB, se.Stage)
	require.Equal(t, "fails", se.Pipeline)
	require.Contains(t, runErr.Error(), "stage "+appB)

	require.Equal(t, int64(10), c.CommittedOffsets(t, appA, inA)[0], "the good stage committed its work on the stop")
	require.Len(t, c.ReadCommitted(t, out), 10)
	st, err := p.Stage(appA).State()
	require.Equal(t, runner.Stopped, st, "the good stage stopped gracefully: %v", err)
	require.ErrorContains(t, p.Healthy(), "stage "+appB+": runner: failed")
	srv := httptest.NewServer(p.Handler(nil))
	defer srv.Close()
	body := get(t, srv.URL+"/healthz", 503)
	require.Contains(t, body, appB+": runner: failed")
	require.Contains(t, body, appA+": runner: stopped")
}

// TestPipelineRepartitionGivenCount checks that a repartition topic gets
// the partition count given to Repartition, not its sender's.
func TestPipelineRepartitionGivenCount(t *testing.T) {
	c := kafkatest.New(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, in, 3)
	c.CreateTopic(t, out, 3)
	p, err := runner.NewPipeline("given", runner.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	words := p.Repartition("words", splitApp, countApp, 5)
	_, err = p.AddTransformer(splitter(&words), runner.ApplicationID(splitApp), runner.InputTopics(in))
	require.NoError(t, err)
	_, err = p.AddTransformer(wordCounter(out), runner.ApplicationID(countApp), runner.InputTopics(words), runner.StateDir(t.TempDir()))
	require.NoError(t, err)
	stop, done := runPipeline(t, p)
	kafkatest.WaitFor(t, 30*time.Second, "the pipeline ready", func() bool { return p.Ready() == nil })
	details, err := c.Adm.ListTopics(context.Background(), words)
	require.NoError(t, err)
	require.Len(t, details[words].Partitions, 5)
	stop()
	require.NoError(t, <-done)
	done <- nil
}

// TestPipelineRepartitionMismatch checks that an existing repartition
// topic with another partition count fails Run before any stage starts,
// with a coded error naming it.
func TestPipelineRepartitionMismatch(t *testing.T) {
	c := kafkatest.New(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, in, 3)
	c.CreateTopic(t, out, 3)
	words := runner.RepartitionTopic(countApp, "words")
	c.CreateTopic(t, words, 2)

	p, err := runner.NewPipeline("mismatch", runner.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	require.Equal(t, words, p.Repartition("words", splitApp, countApp, 0))
	split, err := p.AddTransformer(splitter(&words), runner.ApplicationID(splitApp), runner.InputTopics(in))
	require.NoError(t, err)
	_, err = p.AddTransformer(wordCounter(out), runner.ApplicationID(countApp), runner.InputTopics(words), runner.StateDir(t.TempDir()))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrPartitionMismatch)
	require.Contains(t, err.Error(), words)
	st, _ := split.State()
	require.Equal(t, runner.NotStarted, st, "no stage started")
}

// TestPipelineConfigErrors checks the problems found without a cluster.
func TestPipelineConfigErrors(t *testing.T) {
	l1 := slog.New(slog.DiscardHandler)
	l2 := slog.New(slog.NewTextHandler(io.Discard, nil))
	r1, r2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	stage := func() runner.Stage { return wordCounter("out") }
	base := func(app string, in ...string) []runner.TransformerOpt {
		return []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in...)}
	}
	tests := []struct {
		name    string
		build   func(p *runner.Pipeline) error
		popts   []runner.Opt
		code    error
		field   string
		atRun   bool
		newFail bool
	}{
		{name: "stage logger differs", popts: []runner.Opt{runner.WithLogger(l1)}, code: flechtwerk.ErrInvalidOption, field: "WithLogger",
			build: func(p *runner.Pipeline) error {
				_, err := p.AddTransformer(stage(), append(base("a", "in"), runner.WithLogger(l2))...)
				return err
			}},
		{name: "same logger is fine", popts: []runner.Opt{runner.WithLogger(l1)},
			build: func(p *runner.Pipeline) error {
				_, err := p.AddTransformer(stage(), append(base("a", "in"), runner.WithLogger(l1))...)
				return err
			}},
		{name: "stage registry differs", popts: []runner.Opt{runner.Metrics(r1)}, code: flechtwerk.ErrInvalidOption, field: "Metrics",
			build: func(p *runner.Pipeline) error {
				_, err := p.AddTransformer(stage(), append(base("a", "in"), runner.Metrics(r2))...)
				return err
			}},
		{name: "duplicate application id", code: flechtwerk.ErrInvalidOption, field: "ApplicationID",
			build: func(p *runner.Pipeline) error {
				if _, err := p.AddTransformer(stage(), base("a", "in")...); err != nil {
					return err
				}
				_, err := p.AddTransformer(stage(), base("a", "in2")...)
				return err
			}},
		{name: "application id on the pipeline", popts: []runner.Opt{runner.ApplicationID("x")}, code: flechtwerk.ErrInvalidOption,
			field: "ApplicationID", newFail: true},
		{name: "no stages", code: flechtwerk.ErrInvalidOption, atRun: true, field: "no stages",
			build: func(*runner.Pipeline) error { return nil }},
		{name: "repartition not read", code: flechtwerk.ErrInvalidOption, atRun: true, field: "does not read it",
			build: func(p *runner.Pipeline) error {
				p.Repartition("w", "a", "b", 0)
				_, err := p.AddTransformer(stage(), base("a", "in")...)
				if err == nil {
					_, err = p.AddTransformer(stage(), base("b", "other")...)
				}
				return err
			}},
		{name: "repartition of an unknown stage", code: flechtwerk.ErrInvalidOption, atRun: true, field: `"nope" is no stage`,
			build: func(p *runner.Pipeline) error {
				_, err := p.AddTransformer(stage(), base("b", p.Repartition("w", "nope", "b", 0))...)
				return err
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := runner.NewPipeline("p", append([]runner.Opt{runner.SeedBrokers("127.0.0.1:1")}, tc.popts...)...)
			if tc.newFail {
				require.ErrorIs(t, err, tc.code)
				require.Contains(t, err.Error(), tc.field)
				return
			}
			require.NoError(t, err)
			err = tc.build(p)
			if tc.atRun {
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err = p.Run(ctx)
			}
			if tc.code == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.code)
			require.Contains(t, err.Error(), tc.field)
		})
	}
}

// TestPipelineExtractorThenCount runs an extractor that sends re-keyed
// records into a repartition topic, sized by default from its config
// topics, and a counter of the new keys; every count must be exact.
func TestPipelineExtractorThenCount(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out := kafkatest.Name("configs"), kafkatest.Name("out")
	exApp, countApp := kafkatest.Name("extract"), kafkatest.Name("count")
	c.CreateTopic(t, cfgTopic, 2)
	c.CreateTopic(t, out, 2)
	c.Produce(t, &kgo.Record{Topic: cfgTopic, Key: []byte("src"), Value: []byte("{}")})

	p, err := runner.NewPipeline("extract-count", runner.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	keyed := p.Repartition("keyed", exApp, countApp, 0)
	const total = 20
	ex := extractor.New(func(ctx context.Context, _ extractor.Config[struct{}], cur int, e *extractor.Emitter[int]) error {
		if cur >= total {
			return nil
		}
		for n := cur; n < cur+5; n++ {
			e.Send(keyed, []byte("w"+strconv.Itoa(n%3)), []byte(strconv.Itoa(n)))
		}
		return e.Commit(ctx, cur+5)
	})
	_, err = p.AddExtractor(ex, runner.ApplicationID(exApp), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(10*time.Millisecond), runner.StateDir(t.TempDir()))
	require.NoError(t, err)
	_, err = p.AddTransformer(wordCounter(out), runner.ApplicationID(countApp), runner.InputTopics(keyed), runner.StateDir(t.TempDir()))
	require.NoError(t, err)
	_, done := runPipeline(t, p)

	want := map[string]int{"w0": 7, "w1": 7, "w2": 6}
	kafkatest.WaitFor(t, 60*time.Second, "every count committed", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("pipeline Run ended: %v", err)
		default:
		}
		got := map[string]int{}
		n := 0
		for _, r := range c.ReadCommitted(t, out) {
			v, err := strconv.Atoi(string(r.Value))
			require.NoError(t, err)
			got[string(r.Key)] = max(got[string(r.Key)], v)
			n++
		}
		require.LessOrEqual(t, n, total, "no output twice")
		return maps.Equal(got, want) && n == total
	})
	details, err := c.Adm.ListTopics(context.Background(), keyed)
	require.NoError(t, err)
	require.Len(t, details[keyed].Partitions, 2, "sized from the extractor's config topics")
}
