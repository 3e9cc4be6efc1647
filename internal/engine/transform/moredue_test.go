package transform

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// manyTimers is a process.Stores processor: a record sets n event-time
// timers, one per key t<i>, all due before the record's timestamp; each
// callback emits its key to out.
type manyTimers struct {
	out string
	n   int
}

func (manyTimers) Validate() error { return nil }
func (manyTimers) Stateful() bool  { return false }
func (manyTimers) Prepare(r *kgo.Record) (process.Input, error) {
	return process.Input{Record: r, Key: r.Key}, nil
}
func (manyTimers) Process(context.Context, process.Input, []byte, bool) (process.Result, error) {
	return process.Result{}, errors.New("Process of a Stores processor")
}
func (manyTimers) Stores() []process.StoreSpec { return nil }
func (manyTimers) Timers() bool                { return true }

func (p manyTimers) ProcessState(_ context.Context, in process.Input, _ []byte, _ bool, _ process.State) (process.Result, error) {
	ops := make([]process.TimerOp, p.n)
	due := in.Record.Timestamp.UnixMilli() - 1
	for i := range ops {
		ops[i] = process.TimerOp{Timer: process.Timer{Key: fmt.Appendf(nil, "t%05d", i), Name: "e", Kind: process.EventTime, Due: due}}
	}
	return process.Result{Timers: ops}, nil
}

func (p manyTimers) Fire(_ context.Context, tm process.Timer, _ []byte, _ bool, _ process.State) (process.Result, error) {
	return process.Result{Outputs: []*kgo.Record{{Topic: p.out, Key: tm.Key, Partition: -1}}}, nil
}

// TestMoreDueFiresWithoutInput: more due event-time timers than a batch
// fires (batch.DefaultMaxTimers) all fire without another record: the
// worker ticks again while timers are due by the stream time.
func TestMoreDueFiresWithoutInput(t *testing.T) {
	const n = batch.DefaultMaxTimers + 5
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("more-in"), kafkatest.Name("more-out"), kafkatest.Name("more")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)

	cfg := config.Defaults(config.Transformer)
	cfg.Brokers, cfg.ApplicationID, cfg.InputTopics, cfg.StateDir = c.Brokers, app, []string{in}, t.TempDir()
	cfg.SessionTimeout, cfg.Logger = 3*time.Second, testLogger()
	cfg.CommitInterval = 100 * time.Millisecond
	cfg.ConsumerOpts = []kgo.Opt{kgo.HeartbeatInterval(200 * time.Millisecond)}
	require.NoError(t, cfg.Validate(config.Transformer, true))
	cfg.EnsureLogger()
	m, err := imetrics.New(nil, app)
	require.NoError(t, err)
	cfg.Metrics = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Params{Cfg: &cfg, Proc: manyTimers{out: out, n: n}, Ops: &testOps{}}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("the engine did not stop within 60s")
		}
	})

	c.Produce(t, &kgo.Record{Topic: in, Partition: 0, Key: []byte("k"), Timestamp: time.UnixMilli(100_000)})
	kafkatest.WaitFor(t, 30*time.Second, "offset 1 committed", func() bool { return c.CommittedOffsets(t, app, in)[0] == 1 })
	var outs []*kgo.Record
	kafkatest.WaitFor(t, 30*time.Second, "every timer's output", func() bool {
		outs = c.ReadCommitted(t, out)
		return len(outs) >= n
	})
	seen := map[string]bool{}
	for _, r := range outs {
		require.False(t, seen[string(r.Key)], "%s fired twice", r.Key)
		seen[string(r.Key)] = true
	}
	require.Len(t, seen, n)
}

// TestTaskConfigCarriesMaxTimers: the MaxTimersPerBatch option reaches
// every task's Config (whose bound TestTickFiresAtMostConfigMaxTimers in
// package task shows).
func TestTaskConfigCarriesMaxTimers(t *testing.T) {
	cfg := config.Defaults(config.Transformer)
	require.Equal(t, batch.DefaultMaxTimers, (&run{c: &cfg}).taskConfig(0, "m").MaxTimers)
	cfg.MaxTimers = 7
	require.Equal(t, 7, (&run{c: &cfg}).taskConfig(3, "m").MaxTimers)
}
