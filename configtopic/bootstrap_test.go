package configtopic_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestTableSupersededBadRecord: during bootstrap only the value that
// survives per key is decoded, so an undecodable value that a later record
// replaced is skipped (and counted) instead of failing the Table.
func TestTableSupersededBadRecord(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Name("cfg")
	c.CreateTopic(t, topic, 1)
	c.Produce(t,
		rec(topic, 0, "a", `{"Limit":`), // undecodable, replaced below
		rec(topic, 0, "a", `{"Limit":2}`),
		rec(topic, 0, "b", `not json`), // undecodable, removed below
		rec(topic, 0, "b", ""),
	)
	tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(topic))
	require.NoError(t, err)
	runTable(t, tbl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, tbl.WaitReady(ctx))
	a, ok := tbl.Get([]byte("a"))
	require.True(t, ok)
	require.Equal(t, tenant{Limit: 2}, a.Config)
	require.Equal(t, int64(1), a.Offset)
	require.Equal(t, [][]byte{[]byte("a")}, tbl.Keys())
	require.Equal(t, configtopic.Stats{BootstrapRecords: 4, Superseded: 2}, tbl.Stats())
}

// TestTableBadRecordFails: a bad value that survives bootstrap fails Run
// with its offset; after the Table is ready a new bad record ends Run.
func TestTableBadRecordFails(t *testing.T) {
	c := kafkatest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("surviving value", func(t *testing.T) {
		topic := kafkatest.Name("cfg")
		c.CreateTopic(t, topic, 1)
		c.Produce(t, rec(topic, 0, "a", `{"Limit":1}`), rec(topic, 0, "a", `{"Limit":`), rec(topic, 0, "b", `{"Limit":3}`))
		tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(topic))
		require.NoError(t, err)
		err = tbl.Run(ctx)
		var rerr *configtopic.RecordError
		require.ErrorAs(t, err, &rerr)
		require.Equal(t, configtopic.RecordError{Topic: topic, Partition: 0, Offset: 1, Key: []byte("a"), Err: rerr.Err}, *rerr)
		require.ErrorIs(t, tbl.WaitReady(ctx), err)
	})
	t.Run("new record while running", func(t *testing.T) {
		topic := kafkatest.Name("cfg")
		c.CreateTopic(t, topic, 1)
		c.Produce(t, rec(topic, 0, "a", `{"Limit":1}`))
		tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(topic))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- tbl.Run(ctx) }()
		require.NoError(t, tbl.WaitReady(ctx))
		c.Produce(t, rec(topic, 0, "a", `{"Limit":`))
		select {
		case err := <-done:
			var rerr *configtopic.RecordError
			require.ErrorAs(t, err, &rerr)
			require.Equal(t, configtopic.RecordError{Topic: topic, Partition: 0, Offset: 1, Key: []byte("a"), Err: rerr.Err}, *rerr)
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not end on a bad record")
		}
		a, ok := tbl.Get([]byte("a"))
		require.True(t, ok)
		require.Equal(t, 1, a.Config.Limit, "the table keeps what it had before the bad record")
	})
}

// TestTableEnrichOncePerKey: bootstrap of {a:1} then {a:2} enriches a once
// (its surviving value); while running every new record is enriched once.
func TestTableEnrichOncePerKey(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Name("cfg")
	c.CreateTopic(t, topic, 1)
	c.Produce(t, rec(topic, 0, "a", `{"Limit":1}`), rec(topic, 0, "a", `{"Limit":2}`))

	var mu sync.Mutex
	var calls []string
	tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(topic),
		configtopic.Enrich(func(ctx context.Context, r *configtopic.Record, v tenant) (tenant, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, string(r.Key)+"="+strconv.Itoa(v.Limit))
			return v, nil
		}))
	require.NoError(t, err)
	runTable(t, tbl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, tbl.WaitReady(ctx))
	mu.Lock()
	require.Equal(t, []string{"a=2"}, calls)
	mu.Unlock()

	c.Produce(t, rec(topic, 0, "a", `{"Limit":3}`), rec(topic, 0, "a", `{"Limit":4}`))
	kafkatest.WaitFor(t, 30*time.Second, "a=4", func() bool {
		a, _ := tbl.Get([]byte("a"))
		return a.Config.Limit == 4
	})
	mu.Lock()
	require.Equal(t, []string{"a=2", "a=3", "a=4"}, calls)
	mu.Unlock()
}

// TestTableReadyAfterCleaning: the records just below the last stable
// offset were removed by log compaction, so no record at LSO-1 is ever
// delivered; the Table is still ready, because it ends its bootstrap by
// fetch position. The last stable offset is held by a transaction another
// writer leaves open. On kfake, kfake.Cluster.Compact cleans the log; on
// Apache Kafka the broker's cleaner does (see TestTableReadyAfterCleaner).
func TestTableReadyAfterCleaning(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") != "" {
		t.Skip("needs kfake.Cluster.Compact to clean below an open transaction; TestTableReadyAfterCleaner covers Apache Kafka")
	}
	fc, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(fc.Close)
	brokers := fc.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := kafkatest.Name("cfg")
	require.NoError(t, fc.CreateTopic(topic, 1, map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "0"}))
	c := &kafkatest.Cluster{Brokers: brokers}
	c.Produce(t, rec(topic, 0, "x", `{"Limit":1}`))
	c.Produce(t, rec(topic, 0, "a", `{"Limit":2}`))
	c.Produce(t, rec(topic, 0, "a", ""))
	openTransaction(t, ctx, brokers, topic)
	fc.Compact()

	offs := readUncommitted(t, ctx, brokers, topic)
	require.Equal(t, []int64{0, 3}, offs, "a and its tombstone (offsets 1, 2) are cleaned, x and the open transaction stay")

	tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(brokers...), configtopic.Topics(topic))
	require.NoError(t, err)
	runTable(t, tbl)
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	require.NoError(t, tbl.WaitReady(wctx))
	require.Equal(t, [][]byte{[]byte("x")}, tbl.Keys())
}

// TestTableReadyAfterCleaner: on Apache Kafka, a config topic whose
// cleaner removed a key and its tombstone: a new Table becomes ready.
func TestTableReadyAfterCleaner(t *testing.T) {
	c := kafkatest.New(t)
	if !c.Real {
		t.Skip("kfake has no background log cleaner; TestTableReadyAfterCleaning covers the embedded broker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := kafkatest.Name("cfg")
	s := func(v string) *string { return &v }
	_, err := c.Adm.CreateTopic(ctx, 1, -1, map[string]*string{
		"cleanup.policy": s("compact"), "segment.ms": s("100"), "delete.retention.ms": s("0"),
		"min.cleanable.dirty.ratio": s("0.01"), "min.compaction.lag.ms": s("0"),
	}, topic)
	require.NoError(t, err)
	c.Produce(t, rec(topic, 0, "a", `{"Limit":1}`))
	c.Produce(t, rec(topic, 0, "a", ""))
	// The cleaner never cleans the active segment, and drops a tombstone
	// only in a pass after the one that found it: new records of another
	// key roll segments (segment.ms) and make the log dirty again.
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; ; i++ {
		offs := readUncommitted(t, ctx, c.Brokers, topic)
		if !slices.Contains(offs, 0) && !slices.Contains(offs, 1) {
			t.Logf("cleaned after %d filler records: offsets left %v", i, offs)
			break
		}
		require.True(t, time.Now().Before(deadline), "the cleaner did not remove offsets 0 and 1: %v", offs)
		time.Sleep(300 * time.Millisecond)
		c.Produce(t, rec(topic, 0, "x", `{"Limit":`+strconv.Itoa(i)+`}`))
	}
	// A transaction left open holds the last stable offset after the last
	// filler.
	openTransaction(t, ctx, c.Brokers, topic)

	tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(topic))
	require.NoError(t, err)
	runTable(t, tbl)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	require.NoError(t, tbl.WaitReady(wctx))
	require.Equal(t, [][]byte{[]byte("x")}, tbl.Keys())
}

// openTransaction writes a record to partition 0 of topic in a transaction
// it leaves open until the test ends.
func openTransaction(t *testing.T, ctx context.Context, brokers []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(kafkatest.Name("open")),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.BeginTransaction())
	require.NoError(t, cl.ProduceSync(ctx, rec(topic, 0, "open", `{"Limit":9}`)).FirstErr())
}

// readUncommitted returns the offsets of every record and marker in
// partition 0 of topic, read_uncommitted, up to the high watermark.
func readUncommitted(t *testing.T, ctx context.Context, brokers []string, topic string) []int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	require.NoError(t, err)
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	end, _ := ends.Lookup(topic, 0)
	var offs []int64
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			return offs // nothing more within the bound: what is left
		}
		require.NoError(t, fs.Err())
		fs.EachRecord(func(r *kgo.Record) { offs = append(offs, r.Offset) })
		if len(offs) > 0 && offs[len(offs)-1] >= end.Offset-1 {
			return offs
		}
	}
}

// TestTableAddedPartition: a partition added to a config topic while the
// Table runs is read from its start.
func TestTableAddedPartition(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Name("cfg")
	c.CreateTopic(t, topic, 1)
	c.Produce(t, rec(topic, 0, "a", `{"Limit":1}`))
	tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(topic))
	require.NoError(t, err)
	tbl.SetPartitionCheck(100 * time.Millisecond)
	runTable(t, tbl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, tbl.WaitReady(ctx))
	resp, err := c.Adm.CreatePartitions(ctx, 1, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	// A producer whose metadata still lists one partition fails a record
	// for partition 1 at once instead of waiting for it.
	c.WaitTopic(t, topic, 2)
	c.Produce(t, rec(topic, 1, "b", `{"Limit":2}`))
	kafkatest.WaitFor(t, 30*time.Second, "b from the added partition", func() bool {
		_, ok := tbl.Get([]byte("b"))
		return ok
	})
}
