package task_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/task"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// acks counts the output records the broker acknowledged.
type acks struct {
	topic string
	n     atomic.Int64
}

func (a *acks) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if r.Topic == a.topic && err == nil {
		a.n.Add(1)
	}
}

// The first batch of a transaction is written before Add returns (its
// produce requests register the transaction's partitions one request at a
// time); later batches are sent without waiting. Everything commits once.
func TestFirstBatchOfTransactionIsWrittenBeforeAddReturns(t *testing.T) {
	c := kafkatest.New(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 6)
	ack := &acks{topic: out}
	proc, ok := stage.TransformerOf(transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		o.Send(out, rec.Key, rec.Value)
		return nil
	}))
	require.True(t, ok)
	ctx := context.Background()
	app := kafkatest.Name("app")
	topics, err := c.Adm.ListTopics(ctx, in)
	require.NoError(t, err)
	tk, err := task.Start(ctx, task.Config{
		ApplicationID: app, Partition: 0, InputTopics: []string{in},
		TopicIDs: map[string][16]byte{in: topics[in].ID},
		StateDir: t.TempDir(), TransactionTimeout: time.Minute,
		KafkaOpts: append(c.Opts(), kgo.SeedBrokers(c.Brokers...), kgo.WithHooks(ack)),
	}, proc)
	require.NoError(t, err)
	defer tk.Close()

	sem := make(chan struct{}, 2)
	next := int64(0)
	batch := func(n int) *task.Batch {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: in, Partition: 0, Offset: next, Key: fmt.Appendf(nil, "k%d", next%60), Value: strconv.AppendInt(nil, next, 10)}
			next++
		}
		b, err := tk.Process(ctx, recs, sem)
		require.NoError(t, err)
		return b
	}
	for txn := range 3 {
		before := ack.n.Load()
		require.NoError(t, tk.Add(ctx, batch(200)))
		require.Equal(t, before+200, ack.n.Load(), "transaction %d: the first batch's records are all written when Add returns", txn)
		for range 3 {
			require.NoError(t, tk.Add(ctx, batch(200)))
		}
		_, err := tk.CommitOpen(ctx)
		require.NoError(t, err)
		require.Equal(t, before+800, ack.n.Load())
	}
	c.WaitSettled(t, out)
	got := c.ReadCommitted(t, out)
	require.Len(t, got, 2400)
	seen := map[string]bool{}
	for _, r := range got {
		require.False(t, seen[string(r.Value)], "output %s twice", r.Value)
		seen[string(r.Value)] = true
	}
}
