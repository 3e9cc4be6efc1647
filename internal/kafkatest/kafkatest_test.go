package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReadCommittedPastAbortedTail: when the last records before the
// listed end are of an aborted transaction whose marker lies past it (the
// end is the first offset of a transaction still open), ReadCommitted
// returns once the open transaction ends, with the committed records.
func TestReadCommittedPastAbortedTail(t *testing.T) {
	c := New(t)
	topic := Name("tail")
	c.CreateTopic(t, topic, 1)
	ctx := context.Background()
	txn := func(id string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		require.NoError(t, cl.BeginTransaction())
		return cl
	}
	c.Produce(t, &kgo.Record{Topic: topic, Value: []byte("committed")}) // offset 0
	a, b := txn(Name("a")), txn(Name("b"))
	require.NoError(t, a.ProduceSync(ctx, &kgo.Record{Value: []byte("aborted")}).FirstErr()) // offset 1
	require.NoError(t, b.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}).FirstErr())    // offset 2
	require.NoError(t, a.EndTransaction(ctx, kgo.TryAbort))                                  // marker at 3

	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(500 * time.Millisecond)
		if err := b.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Errorf("committing b: %v", err)
		}
	}()
	outs := c.ReadCommitted(t, topic) // lists end 2: b is open
	<-done
	require.Len(t, outs, 1)
	require.Equal(t, "committed", string(outs[0].Value))
}
