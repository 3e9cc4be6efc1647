package task_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/task"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// putter puts each record's value under its key in the default store.
type putter struct{}

func (putter) Validate() error { return nil }
func (putter) Stateful() bool  { return true }
func (putter) Prepare(r *kgo.Record) (process.Input, error) {
	return process.Input{Record: r, Key: r.Key}, nil
}
func (putter) Process(_ context.Context, in process.Input, _ []byte, _ bool) (process.Result, error) {
	return process.Result{Op: process.Put, State: in.Record.Value}, nil
}

// TestDefaultRestoreAfterKilledLane: an instance of the shared-producer
// mode was killed with its lane's transaction open on changelog partition
// 0 (its random transactional ID is fenced by nobody), and the group
// switched to the default mode (docs/operations.md, "Switching modes").
// Task 0 starts on instance A: its restore waits for that transaction to
// end before it reads the changelog. A commits k=v1, and the task moves to
// B, whose restore finds k: the open transaction never holds a restore's
// end below records committed after it.
func TestDefaultRestoreAfterKilledLane(t *testing.T) {
	c := kafkatest.New(t)
	in, app := kafkatest.Name("in"), kafkatest.Name("app")
	cl := app + "-changelog"
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, cl, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	details, err := c.Adm.ListTopics(ctx, in)
	require.NoError(t, err)
	member := c.JoinGroup(t, app, in)

	// The killed shared instance's lane: a transaction open on the
	// changelog partition, never ended.
	zombie, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.TransactionalID(app+"-shared-deadbeef"),
		kgo.TransactionTimeout(60*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer zombie.Close()
	require.NoError(t, zombie.BeginTransaction())
	require.NoError(t, zombie.ProduceSync(ctx, &kgo.Record{Topic: cl, Partition: 0, Key: []byte("z"), Value: []byte("zombie")}).FirstErr())

	cfg := func(dir string) task.Config {
		return task.Config{ApplicationID: app, Partition: 0, InputTopics: []string{in}, Changelog: cl,
			TopicIDs: map[string][16]byte{in: details[in].ID}, StateDir: dir, TransactionTimeout: 30 * time.Second,
			KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, Member: member.Identity}
	}
	sem := make(chan struct{}, 2)

	// The broker times the lane's transaction out a moment later.
	go func() {
		time.Sleep(2 * time.Second)
		_ = zombie.EndTransaction(context.Background(), kgo.TryAbort)
	}()
	a, err := task.Start(ctx, cfg(t.TempDir()), putter{})
	require.NoError(t, err)
	require.NoError(t, a.Restore(ctx, c.Adm))
	b, err := a.Process(ctx, []*kgo.Record{{Topic: in, Partition: 0, Offset: 0, Key: []byte("k"), Value: []byte("v1"), Timestamp: time.UnixMilli(1)}}, sem)
	require.NoError(t, err)
	require.NoError(t, a.Add(ctx, b))
	_, err = a.CommitOpen(ctx)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 1}, c.CommittedOffsets(t, app, in), "k's input offset is committed")
	require.NoError(t, a.Close())

	bt, err := task.Start(ctx, cfg(t.TempDir()), putter{})
	require.NoError(t, err)
	defer bt.Close()
	require.NoError(t, bt.Restore(ctx, c.Adm))
	v, found, err := bt.Store().Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, found, "the restored store misses k=v1, committed with its input offset (lost state)")
	require.Equal(t, "v1", string(v))
}
