package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// envPipelineChild makes the test binary a stage process of
// BenchmarkPipeline (see pipelineChild) instead of running tests.
const envPipelineChild = "FLECHTWERK_BENCH_PIPELINE_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(envPipelineChild); spec != "" {
		os.Exit(pipelineChild(spec))
	}
	os.Exit(m.Run())
}

// pipelineSpec is what a stage process runs: the stages named in Stages
// ("rekey", "count" or both) of the two-stage pipeline in -> rekey ->
// repartition topic -> count -> out.
type pipelineSpec struct {
	Brokers, In, Out, RekeyApp, CountApp, StateDir string
	Stages                                         []string
}

func (s pipelineSpec) encode() string {
	return strings.Join([]string{strings.Join([]string{s.Brokers, s.In, s.Out, s.RekeyApp, s.CountApp, s.StateDir}, "|"), strings.Join(s.Stages, ",")}, "#")
}

func decodeSpec(v string) (pipelineSpec, error) {
	head, stages, ok := strings.Cut(v, "#")
	f := strings.Split(head, "|")
	if !ok || len(f) != 6 {
		return pipelineSpec{}, fmt.Errorf("bad spec %q", v)
	}
	return pipelineSpec{Brokers: f[0], In: f[1], Out: f[2], RekeyApp: f[3], CountApp: f[4], StateDir: f[5], Stages: strings.Split(stages, ",")}, nil
}

// repartitioned returns the repartition topic between the stages.
func (s pipelineSpec) repartitioned() string { return runner.RepartitionTopic(s.CountApp, "keys") }

// pipelineChild runs the stages of spec in one runner.Pipeline until
// SIGTERM, and returns the exit code.
func pipelineChild(v string) int {
	spec, err := decodeSpec(v)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p, err := runner.NewPipeline("bench", runner.SeedBrokers(strings.Split(spec.Brokers, ",")...))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	words := spec.repartitioned()
	rekey := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		n, err := strconv.Atoi(string(rec.Value))
		if err != nil {
			return err
		}
		o.Send(words, strconv.AppendInt([]byte("r"), int64(n%997), 10), rec.Value)
		return nil
	})
	count := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send(spec.Out, rec.Key, strconv.AppendInt(nil, int64(n), 10))
		return nil
	})
	both := len(spec.Stages) == 2
	if both {
		// The topic exists already: the pipeline checks its count.
		p.Repartition("keys", spec.RekeyApp, spec.CountApp, 0)
	}
	for _, s := range spec.Stages {
		switch s {
		case "rekey":
			_, err = p.AddTransformer(rekey, runner.ApplicationID(spec.RekeyApp), runner.InputTopics(spec.In))
		case "count":
			_, err = p.AddTransformer(count, runner.ApplicationID(spec.CountApp), runner.InputTopics(words),
				runner.StateDir(spec.StateDir))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := p.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// BenchmarkPipeline compares a two-stage pipeline (a stateless stage that
// re-keys each record into a repartition topic, then a stateful counter)
// run in one process against the same two stages run as two processes, on
// the same broker in the same run. The broker runs in the benchmark's
// process (kfake, or KAFKA_BROKERS), the stages in child processes. Each
// reports the drain rate of b.N records through both stages (records/s);
// two-processes also reports its rate over one-process (x-one-process).
//
//	go test -run '^$' -bench BenchmarkPipeline -benchtime 20000x ./bench/
func BenchmarkPipeline(b *testing.B) {
	var one float64
	b.Run("one-process", func(b *testing.B) { one = benchPipeline(b, [][]string{{"rekey", "count"}}) })
	b.Run("two-processes", func(b *testing.B) {
		rate := benchPipeline(b, [][]string{{"rekey"}, {"count"}})
		if one > 0 {
			b.ReportMetric(rate/one, "x-one-process")
		}
	})
}

// benchPipeline runs one process per entry of procs, each running the
// stages it names, and measures the drain of b.N records through both.
func benchPipeline(b *testing.B, procs [][]string) float64 {
	c := kafkatest.New(b)
	spec := pipelineSpec{
		Brokers: strings.Join(c.Brokers, ","), In: kafkatest.Name("pipe-in"), Out: kafkatest.Name("pipe-out"),
		RekeyApp: kafkatest.Name("pipe-rekey"), CountApp: kafkatest.Name("pipe-count"), StateDir: b.TempDir(),
	}
	words := spec.repartitioned()
	for _, t := range []string{spec.In, spec.Out} {
		c.CreateTopic(b, t, partitions)
	}
	// The repartition topic as a pipeline creates it (and checks it):
	// the two-process variant needs it to exist.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noLimit := "-1"
	_, err := c.Adm.CreateTopic(ctx, partitions, -1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("delete"), "retention.ms": &noLimit, "retention.bytes": &noLimit}, words)
	require.NoError(b, err)
	c.WaitTopic(b, words, partitions)
	warmup, recs := inputs(spec.In, b.N)
	for i, r := range warmup {
		r.Value = []byte(strconv.Itoa(i))
	}

	var logs []*bytes.Buffer
	done := make(chan error, len(procs))
	var cmds []*exec.Cmd
	for _, stages := range procs {
		s := spec
		s.Stages = stages
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envPipelineChild+"="+s.encode())
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(b, cmd.Start())
		cmds, logs = append(cmds, cmd), append(logs, &log)
		go func() { done <- cmd.Wait() }()
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		for range cmds {
			select {
			case err := <-done:
				require.NoError(b, err, "stage process: %s", logs)
			case <-time.After(60 * time.Second):
				b.Fatalf("a stage process did not stop within 60s")
			}
		}
	}
	defer func() {
		if !stopped {
			for _, cmd := range cmds {
				_ = cmd.Process.Kill()
			}
		}
	}()

	// Warm up: every task of both stages started and committed once.
	c.Produce(b, warmup...)
	drainStages(b, c, spec, ends(0), done)

	b.ResetTimer()
	c.Produce(b, recs...)
	drainStages(b, c, spec, ends(b.N), done)
	b.StopTimer()
	stop()
	c.WaitSettled(b, spec.Out)
	require.Len(b, c.ReadCommitted(b, spec.Out), partitions+b.N, "one count per input")
	return reportRate(b)
}

// drainStages waits until the rekey stage committed want of the input and
// the count stage the end of the repartition topic.
func drainStages(b *testing.B, c *kafkatest.Cluster, spec pipelineSpec, want map[int32]int64, done <-chan error) {
	b.Helper()
	waitCommitted(b, c, spec.RekeyApp, spec.In, want, done)
	waitCommitted(b, c, spec.CountApp, spec.repartitioned(), c.EndOffsets(b, spec.repartitioned()), done)
}
