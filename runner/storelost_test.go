package runner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestLostStoreChangelogRefused: the input offsets of a stage with named
// stores name its stores and its timer store in their metadata, whether
// they commit in a transaction or directly (an interval that wrote
// nothing). A store added to a running application starts empty; once
// its offsets name it, a start that finds the store's changelog topic
// gone is refused with CHANGELOG_MISSING naming the topic, instead of
// starting the store empty.
func TestLostStoreChangelogRefused(t *testing.T) {
	c := kafkatest.New(t)
	in, app := kafkatest.Name("in"), kafkatest.Name("lost")
	c.CreateTopic(t, in, 2)
	seenTopic := changelog.StoreTopic(app, "seen")
	run := func(st *transformer.Stage[transformer.None]) (stop func() error) {
		r, err := NewTransformer(st, SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in),
			StateDir(t.TempDir()), CommitInterval(50*time.Millisecond))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		t.Cleanup(cancel)
		return func() error {
			cancel()
			return <-done
		}
	}
	produce := func(from, to int) {
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			// Partition 1 gets keys the stage writes nothing for, all
			// at one timestamp: once its stream time is stored, its
			// offsets commit directly, without a transaction.
			recs = append(recs,
				&kgo.Record{Topic: in, Partition: 0, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("x")},
				&kgo.Record{Topic: in, Partition: 1, Key: []byte("skip"), Value: []byte("x"), Timestamp: time.UnixMilli(1000)})
		}
		c.Produce(t, recs...)
	}
	committed := func(n int64) {
		kafkatest.WaitFor(t, 30*time.Second, fmt.Sprintf("offsets %d committed", n), func() bool {
			o := c.CommittedOffsets(t, app, in)
			return o[0] == n && o[1] == n
		})
	}
	noop := func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil }

	// Without stores: the offsets carry no store names.
	metadata := func() map[int32]string {
		offs, err := c.Adm.FetchOffsets(context.Background(), app)
		require.NoError(t, err)
		m := map[int32]string{}
		offs.Each(func(o kadm.OffsetResponse) { m[o.Partition] = o.Metadata })
		return m
	}
	stop := run(transformer.Stateless(noop))
	produce(0, 5)
	committed(5)
	require.NoError(t, stop())
	for p, m := range metadata() {
		require.False(t, changelog.HasStores(m), "partition %d: metadata %q", p, m)
	}

	// A store added: it starts empty, and the offsets name it.
	seen := transformer.NewStore[int]("seen", nil)
	withStore := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		if string(rec.Key) == "skip" {
			return nil
		}
		return seen.Put(o, rec.Key, 1)
	}, transformer.Stores(seen))
	stop = run(withStore)
	produce(5, 8)
	committed(8)
	timers := changelog.TimersTopic(app)
	c.WaitSettled(t, timers)
	before := c.EndOffsets(t, timers)[1]
	produce(8, 10)
	committed(10)
	require.NoError(t, stop())
	// Partition 1's last offsets committed without a transaction: no
	// marker (nor record) was added to its changelog partitions.
	require.Equal(t, before, c.EndOffsets(t, timers)[1], "partition 1 committed in a transaction")
	for p, m := range metadata() {
		require.True(t, changelog.NamesStore(m, "seen"), "partition %d: metadata %q", p, m)
		require.True(t, changelog.NamesStore(m, changelog.TimersName), "partition %d: metadata %q", p, m)
	}

	// The store's changelog lost: refused, nothing started.
	resp, err := c.Adm.DeleteTopics(context.Background(), seenTopic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	kafkatest.WaitFor(t, 30*time.Second, "the store's changelog deleted", func() bool {
		td, err := c.Adm.ListTopics(context.Background(), seenTopic)
		return err == nil && !td.Has(seenTopic)
	})
	r, err := NewTransformer(withStore, SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in), StateDir(t.TempDir()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrChangelogMissing)
	require.ErrorContains(t, err, seenTopic)
	require.ErrorContains(t, err, "store seen")
	td, err := c.Adm.ListTopics(context.Background(), seenTopic)
	require.NoError(t, err)
	require.False(t, td.Has(seenTopic), "the refused start created the store's changelog")
}
