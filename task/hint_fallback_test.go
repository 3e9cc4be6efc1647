package task_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/task"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// hinter sets timer "t" of its record's key: at 100 for a record "set",
// as a hint at 500 for a record "hint". No state, no output.
type hinter struct{}

func (hinter) Validate() error { return nil }
func (hinter) Stateful() bool  { return false }
func (hinter) Prepare(r *kgo.Record) (process.Input, error) {
	return process.Input{Record: r, Key: r.Key}, nil
}
func (hinter) Process(context.Context, process.Input, []byte, bool) (process.Result, error) {
	return process.Result{}, errors.New("Process of a Stores processor")
}
func (hinter) Stores() []process.StoreSpec { return nil }
func (hinter) Timers() bool                { return true }
func (hinter) ProcessState(_ context.Context, in process.Input, _ []byte, _ bool, _ process.State) (process.Result, error) {
	op := process.TimerOp{Timer: process.Timer{Key: in.Key, Name: "t", Kind: process.EventTime, Due: 100}}
	if string(in.Record.Value) == "hint" {
		op.Due, op.Hint = 500, true
	}
	return process.Result{Timers: []process.TimerOp{op}}, nil
}
func (hinter) Fire(context.Context, process.Timer, []byte, bool, process.State) (process.Result, error) {
	return process.Result{}, nil
}

// TestUnchangedHintLeavesItsTimer: a transaction whose only write is a
// hint of a timer due earlier (Prepare drops it: nothing changes) still
// sends a record, since kgo ends no transaction that sent nothing; that
// record must not apply the hint as a set, which would move the timer
// later.
func TestUnchangedHintLeavesItsTimer(t *testing.T) {
	c := kafkatest.New(t)
	in, app := kafkatest.Name("in"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, changelog.TimersTopic(app), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	details, err := c.Adm.ListTopics(ctx, in)
	require.NoError(t, err)
	member := c.JoinGroup(t, app, in)
	tk, err := task.Start(ctx, task.Config{ApplicationID: app, InputTopics: []string{in},
		TopicIDs: map[string][16]byte{in: details[in].ID}, StateDir: t.TempDir(), TransactionTimeout: 30 * time.Second,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, Member: member.Identity}, hinter{})
	require.NoError(t, err)
	t.Cleanup(func() { tk.Close() })
	require.NoError(t, tk.Restore(ctx, c.Adm))
	sem := make(chan struct{}, 2)
	for i, v := range []string{"set", "hint"} {
		b, err := tk.Process(ctx, []*kgo.Record{{Topic: in, Offset: int64(i), Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(1)}}, sem)
		require.NoError(t, err)
		require.NoError(t, tk.Add(ctx, b))
		_, err = tk.CommitOpen(ctx)
		require.NoError(t, err)
	}
	var got []int64
	require.NoError(t, tk.TimerStore().KeyTimers([]byte("k"), func(_ string, _ uint8, due int64) (bool, error) {
		got = append(got, due)
		return true, nil
	}))
	require.Equal(t, []int64{100}, got, "a hint due later than the timer must leave it")
}
