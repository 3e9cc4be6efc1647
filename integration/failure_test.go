package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// requireNoOpenTransaction fails when a transaction of one of the
// application's tasks is still open on the broker.
func requireNoOpenTransaction(t testing.TB, c *kafkatest.Cluster, app string, partitions int32) {
	t.Helper()
	ids := make([]string, partitions)
	for n := range partitions {
		ids[n] = fencing.TransactionalID(app, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	described, err := c.Adm.DescribeTransactions(ctx, ids...)
	require.NoError(t, err)
	for _, id := range ids {
		d, ok := described[id]
		require.True(t, ok, "transaction %s described", id)
		require.NoError(t, d.Err)
		require.NotEqual(t, "Ongoing", d.State, "transaction %s is left open", id)
	}
}

// TestPanicAbortsBatch panics in user code (the transform, the state-key
// function) on one record of partition 0 while partition 1 runs in the same
// batch. Run ends with a *transformer.ProcessError naming topic, partition, offset
// and key whose Err is a *flechtwerk.PanicError with the stack; nothing of
// partition 0's batch is visible and its offset did not move; no task left
// a transaction open (the transaction timeout is long, so a left-open
// transaction would show); a restart then processes every input exactly
// once, promptly.
func TestPanicAbortsBatch(t *testing.T) {
	for _, where := range []string{"transform", "state key"} {
		t.Run(where, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 2)
			c.CreateTopic(t, out, 2)
			opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
				runner.StateDir(t.TempDir()), runner.MaxPollRecords(1000),
				runner.TransactionTimeout(10 * time.Minute)}

			p1 := values(in, 1, "b", 10, 3)
			for _, r := range p1 {
				r.Key = append([]byte("p1-"), r.Key...) // keys are per partition
			}
			ins := append(values(in, 0, "a", 10, 3), p1...)
			const poisonAt = 4
			ins[poisonAt].Value = []byte("poison")
			c.Produce(t, ins...)
			poison := ins[poisonAt]

			panicky := func(rec *transformer.Record) {
				if string(rec.Value) == "poison" {
					panic(fmt.Sprintf("%s panics on offset %d", where, rec.Offset))
				}
			}
			var proc *transformer.Stage[int]
			if where == "transform" {
				proc = echoCounter(out, func(rec *transformer.Record) error { panicky(rec); return nil })
			} else {
				echo := func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
					n++
					e.SetState(n)
					e.Send(out, rec.Key, []byte(fmt.Sprintf("%s#%d", rec.Value, n)))
					return nil
				}
				proc = transformer.New(echo, transformer.StateKey(func(rec *transformer.Record) []byte {
					panicky(rec)
					return rec.Key
				}))
			}
			rn := start(t, c, proc, opts...)
			err := rn.wait(t, 30*time.Second)
			var pe *transformer.ProcessError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, in, pe.Topic)
			require.Equal(t, int32(0), pe.Partition)
			require.Equal(t, poison.Offset, pe.Offset)
			require.Equal(t, poison.Key, pe.Key)
			var panicErr *flechtwerk.PanicError
			require.ErrorAs(t, err, &panicErr)
			require.Equal(t, fmt.Sprintf("%s panics on offset %d", where, poison.Offset), panicErr.Value)
			require.Contains(t, string(panicErr.Stack), "integration.TestPanicAbortsBatch", "the stack names the panicking code")
			require.ErrorContains(t, err, fmt.Sprintf("topic %s partition 0 offset %d", in, poison.Offset))

			// No task left a transaction open: the outputs are stable at once
			// (not after the 10 minute transaction timeout).
			requireNoOpenTransaction(t, c, app, 2)
			for _, r := range readStable(t, c, out) {
				require.False(t, strings.HasPrefix(string(r.Value), "a"), "output %s of the aborted batch of partition 0 is visible", r.Value)
			}
			require.Zero(t, c.CommittedOffsets(t, app, in)[0], "offset of partition 0 advanced")

			// A restart with a transform that no longer panics is not held up
			// by an open transaction and replays exactly once.
			poison.Value = []byte("poison") // an ordinary value now
			rn = start(t, c, echoCounter(out, nil), opts...)
			waitCommitted(t, c, app, in, 30*time.Second, rn.done)
			require.NoError(t, rn.stop(t))
			requireExactlyOnce(t, ins, readStable(t, c, out))
		})
	}
}

// TestBatchTimeoutAbandonsStuckTransform runs a transform that blocks,
// ignoring ctx, on one record of partition 0. Run must end with
// ErrBatchTimeout naming task 0 within a bounded time, without waiting for
// the stuck goroutine; nothing of the batch becomes visible and its offset
// does not move, not even after the goroutine is released and finishes.
func TestBatchTimeoutAbandonsStuckTransform(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	ins := values(in, 0, "a", 10, 1) // one key: the records after the stuck one run after it
	ins[3].Value = []byte("stuck")
	c.Produce(t, ins...)

	release, returned := make(chan struct{}), make(chan struct{})
	var once bool
	t.Cleanup(func() {
		if !once {
			close(release)
		}
	})
	proc := echoCounter(out, func(rec *transformer.Record) error {
		if string(rec.Value) == "stuck" {
			<-release // ignores ctx
			close(returned)
		}
		return nil
	})
	const batchTimeout = 2 * time.Second
	began := time.Now()
	rn := start(t, c, proc, runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.BatchTimeout(batchTimeout), runner.TransactionTimeout(10*time.Minute))
	err := rn.wait(t, 30*time.Second)
	took := time.Since(began)
	t.Logf("Run: %v (after %v)", err, took)
	require.ErrorIs(t, err, flechtwerk.ErrBatchTimeout)
	var bte *runner.BatchTimeoutError
	require.ErrorAs(t, err, &bte)
	require.Equal(t, []int32{0}, bte.Partitions)
	require.ErrorContains(t, err, fmt.Sprintf("task 0 (topic %s partition 0 from offset 0)", in))

	requireNoOpenTransaction(t, c, app, 1)
	require.Empty(t, readStable(t, c, out), "nothing of the batch is visible")
	require.Empty(t, readStable(t, c, app+"-changelog"), "no state of the batch is visible")
	require.Empty(t, c.CommittedOffsets(t, app, in), "offsets did not advance")

	// The abandoned goroutine finishes the batch late: its task is closed,
	// so nothing of it is committed.
	once = true
	close(release)
	<-returned
	time.Sleep(time.Second)
	requireNoOpenTransaction(t, c, app, 1)
	require.Empty(t, readStable(t, c, out), "nothing of the abandoned batch is visible")
	require.Empty(t, c.CommittedOffsets(t, app, in), "offsets did not advance")
}

// TestBatchTimeoutWithTransformHonoringCtx: a transform that returns
// ctx.Err() at the batch deadline ends Run with the same coded error.
func TestBatchTimeoutWithTransformHonoringCtx(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, values(in, 0, "a", 3, 1)...)
	proc := transformer.Stateless(func(ctx context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		o.Send(out, rec.Key, rec.Value)
		if rec.Offset == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	rn := start(t, c, proc, runner.ApplicationID(app), runner.InputTopics(in), runner.BatchTimeout(time.Second))
	err := rn.wait(t, 30*time.Second)
	require.ErrorIs(t, err, flechtwerk.ErrBatchTimeout)
	require.ErrorContains(t, err, "task 0")
	require.Empty(t, readStable(t, c, out))
	require.Empty(t, c.CommittedOffsets(t, app, in))
}

// TestProduceErrorNamesTopicPartition fails the produce of an output record
// (too large for a batch; a topic that does not exist): Run's error names
// the record's topic and partition and keeps the broker's error.
func TestProduceErrorNamesTopicPartition(t *testing.T) {
	cases := []struct {
		name    string
		value   []byte
		missing bool // the output topic is not created
		want    error
		where   string
	}{
		{name: "record too large", value: make([]byte, 2<<20), want: kerr.MessageTooLarge, where: "topic %s partition 0"},
		{name: "unknown topic", value: []byte("v"), missing: true, want: kerr.UnknownTopicOrPartition, where: "topic %s (no partition assigned)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 1)
			if !tc.missing {
				c.CreateTopic(t, out, 1)
			}
			c.Produce(t, values(in, 0, "a", 3, 1)...)
			echo := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
				o.Send(out, rec.Key, tc.value)
				return nil
			})
			rn := start(t, c, echo, runner.ApplicationID(app), runner.InputTopics(in))
			err := rn.wait(t, 60*time.Second)
			t.Logf("Run: %v", err)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, "produce to "+fmt.Sprintf(tc.where, out))
			require.Empty(t, c.CommittedOffsets(t, app, in), "offsets did not advance")
		})
	}
}

// TestLostGroupSession removes the runner's (static) member from the group
// behind its back: its next heartbeat learns it is no longer a member
// (UNKNOWN_MEMBER_ID), a transient loss of the group session. Run does not
// end: the tasks are closed dirty, the member rejoins, and records produced
// after the removal are processed exactly once with the state continued.
func TestLostGroupSession(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	first := values(in, 0, "a", 3, 1)
	c.Produce(t, first...)
	instance := kafkatest.Name("member")
	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.WithConsumerOpts(kgo.InstanceID(instance)))
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Adm.LeaveGroup(ctx, kadm.LeaveGroup(app).InstanceIDs(instance).Reason("test removes the member"))
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	// The member notices at its next heartbeat and rejoins.
	kafkatest.WaitFor(t, 60*time.Second, "the removed member rejoined", func() bool {
		select {
		case err := <-rn.done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
		gs, err := c.Adm.DescribeGroups(ctx, app)
		if err != nil {
			return false
		}
		g, ok := gs[app]
		if !ok || g.Err != nil {
			return false
		}
		for _, m := range g.Members {
			if m.InstanceID != nil && *m.InstanceID == instance {
				return true
			}
		}
		return false
	})

	second := values(in, 0, "b", 3, 1)
	c.Produce(t, second...)
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t), "a lost session with a transient cause does not end Run")
	requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
}
