package configtopic_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

type tenant struct {
	Limit int
	// Secret is filled in by the enrich hook.
	Secret string
}

func rec(topic string, p int32, key, value string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(key)}
	if value != "" {
		r.Value = []byte(value)
	}
	return r
}

// runTable runs tbl until the test ends and returns Run's result channel.
func runTable[C any](t *testing.T, tbl *configtopic.Table[C]) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tbl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("table did not stop")
		default:
		}
	})
	return done
}

// TestTable reads two topics in full (latest value per key, tombstones
// remove), enriches each surviving key once, and keeps up with new records.
func TestTable(t *testing.T) {
	c := kafkatest.New(t)
	t1, t2 := kafkatest.Name("cfg"), kafkatest.Name("cfg")
	c.CreateTopic(t, t1, 2)
	c.CreateTopic(t, t2, 3)
	c.Produce(t,
		rec(t1, 0, "acme", `{"Limit":1}`),
		rec(t1, 1, "globex", `{"Limit":2}`),
		rec(t1, 0, "acme", `{"Limit":3}`),
		rec(t2, 2, "initech", `{"Limit":4}`),
		rec(t1, 1, "globex", ""), // tombstone
	)

	var enriched atomic.Int64
	tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(t1, t2),
		configtopic.Enrich(func(ctx context.Context, r *configtopic.Record, v tenant) (tenant, error) {
			enriched.Add(1)
			v.Secret = "s3cret-" + string(r.Key)
			return v, nil
		}))
	require.NoError(t, err)
	select {
	case <-tbl.Ready():
		t.Fatal("ready before Run")
	default:
	}
	done := runTable(t, tbl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, tbl.WaitReady(ctx))

	require.Equal(t, 2, tbl.Len())
	require.Equal(t, [][]byte{[]byte("acme"), []byte("initech")}, tbl.Keys())
	acme, ok := tbl.Get([]byte("acme"))
	require.True(t, ok)
	require.Equal(t, tenant{Limit: 3, Secret: "s3cret-acme"}, acme.Config)
	require.Equal(t, t1, acme.Topic)
	require.Equal(t, int64(1), acme.Offset)
	_, ok = tbl.Get([]byte("globex"))
	require.False(t, ok, "tombstoned")
	require.Equal(t, int64(2), enriched.Load(), "enrich runs once per surviving key")
	require.Equal(t, configtopic.Stats{BootstrapRecords: 5, Superseded: 2}, tbl.Stats())

	var keys []string
	tbl.Range(func(e configtopic.Entry[tenant]) bool {
		keys = append(keys, string(e.Key)+"="+strconv.Itoa(e.Config.Limit))
		return true
	})
	require.Equal(t, []string{"acme=3", "initech=4"}, keys)

	// Records written while running reach the table.
	changed := tbl.Changed()
	c.Produce(t, rec(t2, 0, "hooli", `{"Limit":5}`), rec(t1, 0, "acme", ""))
	select {
	case <-changed:
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no change seen")
	}
	kafkatest.WaitFor(t, 30*time.Second, "hooli added and acme removed", func() bool {
		_, hooli := tbl.Get([]byte("hooli"))
		_, acme := tbl.Get([]byte("acme"))
		return hooli && !acme
	})
	require.Equal(t, [][]byte{[]byte("hooli"), []byte("initech")}, tbl.Keys())
	require.Equal(t, int64(3), enriched.Load(), "enrich runs once per new record")
}

// TestTableTransactional reads only committed records of transactional
// writers.
func TestTableTransactional(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Name("cfg")
	c.CreateTopic(t, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.TransactionalID(kafkatest.Name("txn")),
		kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	for i, commit := range []bool{true, false, true} {
		require.NoError(t, cl.BeginTransaction())
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(`{"Limit":1}`)}).FirstErr())
		require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	// EndTxn returns before the markers are written: the table is ready at
	// the last stable offset it sees at startup, so wait for the last one.
	kafkatest.WaitFor(t, 30*time.Second, "the last transaction's marker", func() bool {
		lso, err := c.Adm.ListCommittedOffsets(ctx, topic)
		require.NoError(t, err)
		o, _ := lso.Lookup(topic, 0)
		return o.Offset == c.EndOffsets(t, topic)[0]
	})

	tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(topic))
	require.NoError(t, err)
	runTable(t, tbl)
	require.NoError(t, tbl.WaitReady(ctx))
	require.Equal(t, [][]byte{[]byte("k0"), []byte("k2")}, tbl.Keys())
}

// TestTableErrors: a missing topic is a coded startup error, an undecodable
// record an error naming topic, partition and offset.
func TestTableErrors(t *testing.T) {
	c := kafkatest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("missing topic", func(t *testing.T) {
		tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(kafkatest.Name("missing")))
		require.NoError(t, err)
		err = tbl.Run(ctx)
		require.ErrorIs(t, err, flechtwerk.ErrMissingTopic)
		require.ErrorIs(t, tbl.WaitReady(ctx), flechtwerk.ErrMissingTopic)
	})
	t.Run("undecodable record", func(t *testing.T) {
		topic := kafkatest.Name("cfg")
		c.CreateTopic(t, topic, 2)
		c.Produce(t, rec(topic, 1, "ok", `{"Limit":1}`), rec(topic, 1, "bad", `{"Limit":`))
		tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(topic))
		require.NoError(t, err)
		err = tbl.Run(ctx)
		var rerr *configtopic.RecordError
		require.ErrorAs(t, err, &rerr)
		require.Equal(t, configtopic.RecordError{Topic: topic, Partition: 1, Offset: 1, Key: []byte("bad"), Err: rerr.Err}, *rerr)
		require.Contains(t, err.Error(), fmt.Sprintf("topic %s partition 1 offset 1", topic))
	})
	t.Run("Run twice", func(t *testing.T) {
		tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(kafkatest.Name("missing")))
		require.NoError(t, err)
		require.Error(t, tbl.Run(ctx))
		require.ErrorContains(t, tbl.Run(ctx), "twice")
	})
}

func TestNewValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []configtopic.Opt
		want []error
	}{
		{"valid", []configtopic.Opt{configtopic.SeedBrokers("b:9092"), configtopic.Topics("t")}, nil},
		{"nothing", nil, []error{flechtwerk.ErrNoBrokers, flechtwerk.ErrNoConfigTopics}},
		{"duplicate topic", []configtopic.Opt{configtopic.SeedBrokers("b:9092"), configtopic.Topics("t", "t")},
			[]error{flechtwerk.ErrDuplicateTopic}},
		{"decoder of another type", []configtopic.Opt{configtopic.SeedBrokers("b:9092"), configtopic.Topics("t"),
			configtopic.Codec(configtopic.Bytes())}, []error{flechtwerk.ErrInvalidOption}},
		{"enrich of another type", []configtopic.Opt{configtopic.SeedBrokers("b:9092"), configtopic.Topics("t"),
			configtopic.Enrich(func(ctx context.Context, r *configtopic.Record, v int) (int, error) { return v, nil })},
			[]error{flechtwerk.ErrInvalidOption}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configtopic.New[tenant](tc.opts...)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range tc.want {
				require.ErrorIs(t, err, w)
			}
		})
	}
}

// TestTableSync: Sync returns once the Table reflects every record below
// the last stable offsets it lists when called. A Table whose Enrich of a
// new record sleeps (a lagging Table) holds Sync until the record is
// applied; a Table that is caught up returns at once, also when its
// partitions end with a transaction marker or an aborted transaction;
// Sync reports Run's end.
func TestTableSync(t *testing.T) {
	c := kafkatest.New(t)
	topic := kafkatest.Name("cfg")
	c.CreateTopic(t, topic, 2)
	c.Produce(t, rec(topic, 0, "a", `{"Limit":1}`))

	entered, release := make(chan struct{}, 1), make(chan struct{})
	tbl, err := configtopic.New[tenant](configtopic.SeedBrokers(c.Brokers...), configtopic.Topics(topic),
		configtopic.Enrich(func(ctx context.Context, r *configtopic.Record, v tenant) (tenant, error) {
			if string(r.Key) == "slow" {
				entered <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
					return v, ctx.Err()
				}
			}
			return v, nil
		}))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- tbl.Run(runCtx) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, tbl.Sync(ctx), "Sync waits for Ready")
	_, ok := tbl.Get([]byte("a"))
	require.True(t, ok)

	// Lagging: the Table read "slow" but has not applied it.
	c.Produce(t, rec(topic, 1, "slow", `{"Limit":2}`))
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the Table never read slow")
	}
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	require.ErrorIs(t, tbl.Sync(short), context.DeadlineExceeded, "Sync returned before the Table applied slow")
	cancelShort()
	synced := make(chan error, 1)
	go func() { synced <- tbl.Sync(ctx) }()
	time.Sleep(100 * time.Millisecond)
	close(release)
	require.NoError(t, <-synced)
	_, ok = tbl.Get([]byte("slow"))
	require.True(t, ok, "Sync returned before slow was applied")

	// Partitions that end with markers: a committed transaction on
	// partition 0, an aborted one on partition 1.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.TransactionalID(kafkatest.Name("txn")),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	for _, tc := range []struct {
		p      int32
		key    string
		commit bool
	}{{0, "committed", true}, {1, "aborted", false}} {
		require.NoError(t, cl.BeginTransaction())
		require.NoError(t, cl.ProduceSync(ctx, rec(topic, tc.p, tc.key, `{"Limit":3}`)).FirstErr())
		require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(tc.commit)))
	}
	// EndTxn returns before the markers are written.
	kafkatest.WaitFor(t, 30*time.Second, "the markers", func() bool {
		lso, err := c.Adm.ListCommittedOffsets(ctx, topic)
		require.NoError(t, err)
		ends := c.EndOffsets(t, topic)
		for p, end := range ends {
			if o, _ := lso.Lookup(topic, p); o.Offset != end {
				return false
			}
		}
		return true
	})
	require.NoError(t, tbl.Sync(ctx))
	_, ok = tbl.Get([]byte("committed"))
	require.True(t, ok, "Sync returned before the committed record was applied")
	_, ok = tbl.Get([]byte("aborted"))
	require.False(t, ok)
	quick, cancelQuick := context.WithTimeout(ctx, 10*time.Second)
	require.NoError(t, tbl.Sync(quick), "a caught-up Table syncs at once")
	cancelQuick()

	stop()
	require.NoError(t, <-done)
	require.Error(t, tbl.Sync(ctx), "Sync after Run ended")
}
