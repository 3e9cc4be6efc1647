package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/task"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// produceGate is a kgo hook that holds the acknowledgement of the first
// record produced to topic until released: the record is on the broker,
// inside a transaction that stays open while the hook blocks.
type produceGate struct {
	topic   string
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func newProduceGate(topic string) *produceGate {
	return &produceGate{topic: topic, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *produceGate) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if r.Topic != g.topic {
		return
	}
	first := false
	g.once.Do(func() { first = true })
	if first && err == nil {
		close(g.reached)
		<-g.release
	}
}

// awaitReached waits until the gate holds a record.
func (g *produceGate) awaitReached(t testing.TB) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("no record was produced within 30s")
	}
}

// fence initializes a producer with the transactional ID of task p: the new
// owner. It is closed when the test ends.
func fence(t testing.TB, c *kafkatest.Cluster, app string, p int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := fencing.Init(ctx, fencing.TransactionalID(app, p), 30*time.Second, kgo.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
}

// requireOpenTransaction checks that topic holds data above its last
// stable offset: an open transaction's records.
func requireOpenTransaction(t testing.TB, c *kafkatest.Cluster, topic string, p int32) {
	t.Helper()
	require.Greater(t, c.EndOffsets(t, topic)[p], lastStable(t, c, topic, p), "records of an open transaction on %s/%d", topic, p)
}

// TestZombieTaskCommitIsFenced runs a task up to its commit, then lets a
// second producer with the task's transactional ID initialize (the new
// owner, e.g. after a rebalance): the old task's commit fails as fenced and
// nothing of it becomes visible, neither outputs, nor changelog writes, nor
// offsets, also when its records were already written inside the open
// transaction. A task started afterwards commits the same batch exactly once.
func TestZombieTaskCommitIsFenced(t *testing.T) {
	tests := []struct {
		name string
		// open: fence while the commit's first record is written and its
		// transaction open; otherwise fence between Process and Commit.
		open bool
	}{
		{name: "fenced before commit"},
		{name: "fenced with open transaction", open: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			const p = 1
			c.CreateTopic(t, in, 2)
			c.CreateTopic(t, out, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			clog := changelog.Topic(app)
			require.NoError(t, changelog.Ensure(ctx, c.Adm, clog, 2, -1))
			details, err := c.Adm.ListTopics(ctx, in)
			require.NoError(t, err)

			inputs := values(in, p, "v", 6, 2)
			c.Produce(t, inputs...)
			member := c.JoinGroup(t, app, in)

			cfg := task.Config{
				ApplicationID:      app,
				Partition:          p,
				InputTopics:        []string{in},
				TopicIDs:           map[string][16]byte{in: details[in].ID},
				Changelog:          clog,
				StateDir:           t.TempDir(),
				TransactionTimeout: 30 * time.Second,
				KafkaOpts:          []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
				Member:             member.Identity,
			}
			proc, ok := stage.TransformerOf(echoCounter(out, nil))
			require.True(t, ok)
			run := func(cfg task.Config) (*task.Task, *task.Batch) {
				tk, err := task.Start(ctx, cfg, proc)
				require.NoError(t, err)
				t.Cleanup(func() { tk.Close() })
				require.NoError(t, tk.Restore(ctx, c.Adm))
				b, err := tk.Process(ctx, inputs, make(chan struct{}, 4))
				require.NoError(t, err)
				require.Equal(t, 6, b.Outputs())
				require.Equal(t, 2, b.StateWrites())
				return tk, b
			}

			zcfg := cfg
			gate := newProduceGate(out)
			if tc.open {
				zcfg.KafkaOpts = append(zcfg.KafkaOpts, kgo.WithHooks(gate))
			}
			zombie, b := run(zcfg)
			if tc.open {
				done := make(chan error, 1)
				go func() { done <- zombie.Commit(ctx, b) }()
				gate.awaitReached(t)
				requireOpenTransaction(t, c, out, 0)
				fence(t, c, app, p)
				close(gate.release)
				err = <-done
			} else {
				fence(t, c, app, p)
				err = zombie.Commit(ctx, b)
			}
			require.Error(t, err)
			t.Logf("zombie ended with: %v", err)
			require.ErrorIs(t, err, fencing.ErrFenced)
			require.NoError(t, zombie.Close())

			require.Empty(t, readStable(t, c, out), "outputs of the zombie")
			require.Empty(t, readStable(t, c, clog), "changelog writes of the zombie")
			requireOffsets(t, c, app, in, map[int32]int64{})

			// The next owner commits the same records exactly once.
			owner, b := run(cfg)
			require.NoError(t, owner.Commit(ctx, b))
			requireExactlyOnce(t, inputs, readStable(t, c, out))
			requireOffsets(t, c, app, in, map[int32]int64{p: 6})
		})
	}
}

// TestZombieRunnerIsFenced fences a running runner's task mid-batch (its
// transform blocked, or its transaction open with records written): Run
// ends with an error wrapping fencing.ErrFenced, nothing of the batch is
// visible and its offsets did not move; a new runner then processes every
// input exactly once.
func TestZombieRunnerIsFenced(t *testing.T) {
	tests := []struct {
		name string
		open bool // block in the produce path instead of in the transform
	}{
		{name: "transform blocked"},
		{name: "transaction open", open: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 1)
			c.CreateTopic(t, out, 1)
			opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
				runner.StateDir(t.TempDir()), runner.MaxPollRecords(1000)}

			first := values(in, 0, "a", 5, 2)
			c.Produce(t, first...)
			rn := start(t, c, echoCounter(out, nil), opts...)
			waitCommitted(t, c, app, in, 30*time.Second, rn.done)
			require.NoError(t, rn.stop(t))
			outBefore := valuesOf(readStable(t, c, out))

			second := values(in, 0, "b", 8, 2)
			c.Produce(t, second...)

			reached, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			proc := echoCounter(out, func(rec *transformer.Record) error {
				if string(rec.Value) == "b3" {
					once.Do(func() { close(reached) })
					<-release
				}
				return nil
			})
			zopts := opts
			gate := newProduceGate(out)
			if tc.open {
				proc = echoCounter(out, nil)
				zopts = append(zopts, runner.WithKafkaOpts(kgo.WithHooks(gate)))
				reached = gate.reached
				release = gate.release
			}
			zombie := start(t, c, proc, zopts...)
			select {
			case <-reached:
			case <-time.After(30 * time.Second):
				t.Fatal("the batch did not reach the blocking point")
			}
			if tc.open {
				requireOpenTransaction(t, c, out, 0)
			}
			fence(t, c, app, 0)
			close(release)
			err := zombie.wait(t, 30*time.Second)
			require.Error(t, err)
			t.Logf("zombie ended with: %v", err)
			require.ErrorIs(t, err, fencing.ErrFenced)

			require.Equal(t, outBefore, valuesOf(readStable(t, c, out)), "nothing of the fenced batch")
			requireOffsets(t, c, app, in, map[int32]int64{0: 5})

			rn = start(t, c, echoCounter(out, nil), opts...)
			waitCommitted(t, c, app, in, 30*time.Second, rn.done)
			require.NoError(t, rn.stop(t))
			requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
		})
	}
}

// TestLateFenceCostsRestartNotCommit plays a zombie whose fence of task 0
// lands after the running owner's (it holds the task's newest producer
// epoch) but whose group member was dropped: its transaction of the
// records it processed is refused by the group and aborted, nothing of it
// is visible and the group offset does not move. The owner, fenced by the
// zombie's late fence, ends Run with ErrFenced (a restart); the restarted
// owner processes every input exactly once.
func TestLateFenceCostsRestartNotCommit(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in), runner.StateDir(t.TempDir())}
	first := values(in, 0, "a", 10, 2)
	c.Produce(t, first...)
	owner := start(t, c, echoCounter(out, nil), opts...)
	waitCommitted(t, c, app, in, 60*time.Second, owner.done)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	details, err := c.Adm.ListTopics(ctx, in)
	require.NoError(t, err)
	groups, err := c.Adm.DescribeGroups(ctx, app)
	require.NoError(t, err)
	require.Len(t, groups[app].Members, 1)
	proc, ok := stage.TransformerOf(echoCounter(out, nil))
	require.True(t, ok)
	zombie, err := task.Start(ctx, task.Config{
		ApplicationID: app, Partition: 0, InputTopics: []string{in},
		TopicIDs: map[string][16]byte{in: details[in].ID}, Changelog: changelog.Topic(app),
		StateDir: t.TempDir(), TransactionTimeout: 30 * time.Second,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		// A member the group no longer knows (dropped when its session
		// timed out).
		Member: func() (string, int32) { return "dropped-" + groups[app].Members[0].MemberID, 1 },
	}, proc)
	require.NoError(t, err)
	defer zombie.Close()
	require.NoError(t, zombie.Restore(ctx, c.Adm))

	second := values(in, 0, "b", 2, 2)
	for i, r := range second {
		r.Offset = int64(10 + i)
	}
	b, err := zombie.Process(ctx, second, make(chan struct{}, 4))
	require.NoError(t, err)
	require.Equal(t, map[string]int64{in: 12}, b.Offsets)
	err = zombie.Commit(ctx, b)
	require.Error(t, err, "the zombie's transaction must be refused by the group")
	t.Logf("zombie ended with: %v", err)
	c.WaitSettled(t, out)
	requireExactlyOnce(t, first, readStable(t, c, out))
	requireOffsets(t, c, app, in, map[int32]int64{0: 10})

	// The owner meets the late fence at its next commit: a restart.
	c.Produce(t, second...)
	err = owner.wait(t, 60*time.Second)
	require.ErrorIs(t, err, fencing.ErrFenced)
	owner = start(t, c, echoCounter(out, nil), opts...)
	waitCommitted(t, c, app, in, 60*time.Second, owner.done)
	require.NoError(t, owner.stop(t))
	requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
}
