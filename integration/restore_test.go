package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/store"
)

// TestRestoreStopsAtLastStableOffset writes a committed, an aborted and a
// still open transaction (of a foreign transactional id, so that no fence
// closes it) to one changelog partition and restores it: only the committed
// writes reach the store, and Restore returns although the last stable
// offset lies below the high watermark. In the interleaved case the record
// just below the last stable offset is aborted data, which a read_committed
// reader never sees: a restore that waits for the record at LSO-1 hangs.
func TestRestoreStopsAtLastStableOffset(t *testing.T) {
	tests := []struct {
		name string
		// interleave: the open transaction writes before the aborted one
		// ends, so the abort marker lies above the last stable offset.
		interleave bool
	}{
		{name: "aborted then open", interleave: false},
		{name: "open inside aborted", interleave: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			app := kafkatest.Name("app")
			topic := changelog.Topic(app)
			const p = 1 // the restored partition; partition 0 stays empty
			c.CreateTopic(t, topic, 2)

			put := func(k, v string) *kgo.Record {
				return &kgo.Record{Topic: topic, Partition: p, Key: []byte(k), Value: []byte(v)}
			}
			del := func(k string) *kgo.Record { return &kgo.Record{Topic: topic, Partition: p, Key: []byte(k)} }

			committed := txnClient(t, c, app+"-writer-committed")
			inTxn(t, committed, kgo.TryCommit, put("k1", "c1"), put("k2", "c2"), put("k3", "c3"))
			waitEnd(t, c, topic, p, 4) // 3 records and the commit marker
			inTxn(t, committed, kgo.TryCommit, del("k3"), put("k1", "c1b"))
			waitEnd(t, c, topic, p, 7)

			aborted := txnClient(t, c, app+"-writer-aborted")
			open := txnClient(t, c, app+"-writer-open")
			require.NoError(t, aborted.BeginTransaction())
			produce(t, aborted, put("k1", "aborted"), put("k4", "aborted"))
			var openFirst int64
			if tc.interleave {
				openFirst = beginAndProduce(t, open, put("k2", "open"), put("k5", "open"))
				endTxn(t, aborted, kgo.TryAbort)
				waitEnd(t, c, topic, p, 12)
			} else {
				endTxn(t, aborted, kgo.TryAbort)
				waitEnd(t, c, topic, p, 10)
				openFirst = beginAndProduce(t, open, put("k2", "open"), put("k5", "open"))
			}

			// The open transaction holds the last stable offset down.
			lso := lastStable(t, c, topic, p)
			require.Equal(t, openFirst, lso, "last stable offset is the open transaction's first offset")
			require.Less(t, lso, c.EndOffsets(t, topic)[p])

			st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { st.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n, err := changelog.Restore(ctx, c.Adm, topic, p, st, kgo.SeedBrokers(c.Brokers...))
			require.NoError(t, err, "restore must end at the last stable offset")
			require.Equal(t, 5, n, "the committed writes, tombstone included")
			require.Equal(t, map[string]string{"k1": "c1b", "k2": "c2"}, contents(t, st))

			// The empty partition restores to nothing at once.
			st0, err := store.Open(context.Background(), t.TempDir(), store.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { st0.Close() })
			n, err = changelog.Restore(ctx, c.Adm, topic, 0, st0, kgo.SeedBrokers(c.Brokers...))
			require.NoError(t, err)
			require.Zero(t, n)
			require.Empty(t, contents(t, st0))
		})
	}
}
