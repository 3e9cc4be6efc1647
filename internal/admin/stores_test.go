package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/admin"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// TestDescribeAndStateGetCoverStores: describe lists the changelog of
// every named store and of the timer store, leaving out the changelog of
// another application whose name extends this one's (its group exists);
// state get --store reads a named store's committed state.
func TestDescribeAndStateGetCoverStores(t *testing.T) {
	ctx := context.Background()
	c := kafkatest.New(t)
	id := kafkatest.Name("app")
	for _, tp := range []string{changelog.Topic(id), changelog.StoreTopic(id, "counts"), changelog.TimersTopic(id), changelog.Topic(id + "-other")} {
		c.CreateTopic(t, tp, 2)
	}
	// The other application's group, committed on its changelog's name
	// (any topic will do).
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: changelog.Topic(id + "-other"), Partition: 0, At: 0})
	_, err := c.Adm.CommitOffsets(ctx, id+"-other", offs)
	require.NoError(t, err)
	c.Produce(t,
		&kgo.Record{Topic: changelog.Topic(id), Partition: 0, Key: []byte("k"), Value: []byte("1")},
		&kgo.Record{Topic: changelog.StoreTopic(id, "counts"), Partition: 1, Key: []byte("k"), Value: []byte(`{"n":7}`)},
		&kgo.Record{Topic: changelog.StoreTopic(id, "counts"), Partition: 1, Key: []byte("gone"), Value: []byte("1")},
		&kgo.Record{Topic: changelog.StoreTopic(id, "counts"), Partition: 1, Key: []byte("gone")},
		&kgo.Record{Topic: changelog.TimersTopic(id), Partition: 1, Key: store.TimerKey([]byte("k"), "t"), Value: store.TimerValue(1, 5)},
	)
	c.Produce(t,
		&kgo.Record{Topic: changelog.TimersTopic(id), Partition: 1, Key: store.TimerKey([]byte("k"), "\x00ttl"), Value: store.TimerValue(2, 9000)},
		&kgo.Record{Topic: changelog.TimersTopic(id), Partition: 1, Key: store.TimerKey([]byte("k"), "c"), Value: store.TimerValue(1, 1)},
		&kgo.Record{Topic: changelog.TimersTopic(id), Partition: 1, Key: store.TimerKey([]byte("k"), "c")},
		&kgo.Record{Topic: changelog.TimersTopic(id), Partition: 1, Key: store.TimerKey([]byte("kk"), "t"), Value: store.TimerValue(1, 2)},
		&kgo.Record{Topic: changelog.TimersTopic(id), Partition: 1, Key: store.TimerKey([]byte("k"), "t"), Value: store.TimerValue(1, 7)},
		&kgo.Record{Topic: changelog.TimersTopic(id), Partition: 1, Key: store.StreamTimeKey, Value: store.StreamTimeValue(6)},
	)

	r := cli(t, c, "", "describe", id, "--json")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var d admin.Description
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d))
	require.True(t, d.Changelog.Exists)
	require.Len(t, d.Stores, 2)
	require.Equal(t, "counts", d.Stores[0].Store)
	require.Equal(t, changelog.StoreTopic(id, "counts"), d.Stores[0].Topic)
	require.Len(t, d.Stores[0].Partitions, 2)
	require.Equal(t, int64(3), d.Stores[0].Records)
	require.Equal(t, "timers", d.Stores[1].Store)
	require.Equal(t, int64(7), d.Stores[1].Records)
	require.Contains(t, d.Notes, "topic "+changelog.Topic(id+"-other")+" is taken for the changelog of application "+id+"-other (a group of that name exists), not of a store \"other\" of "+id)

	h := cli(t, c, "", "describe", id)
	require.Equal(t, admin.ExitOK, h.code, h.stderr)
	require.Contains(t, h.stdout, "Store counts, changelog "+changelog.StoreTopic(id, "counts")+": 2 partition(s), 3 offsets")
	require.Contains(t, h.stdout, "Store timers, changelog "+changelog.TimersTopic(id)+": 2 partition(s), 7 offsets")

	r = cli(t, c, "", "state", "get", "--json", "--store", "counts", "--partition", "1", id, "k")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var sv admin.StateValue
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sv))
	require.Equal(t, "counts", sv.Store)
	require.Equal(t, changelog.StoreTopic(id, "counts"), sv.Topic)
	require.JSONEq(t, `{"n":7}`, string(sv.Value))

	r = cli(t, c, "", "state", "get", "--store", "counts", "--partition", "1", id, "gone")
	require.Equal(t, admin.ExitError, r.code, "a deleted key has no state")
	require.Contains(t, r.stderr, "has no committed state in "+changelog.StoreTopic(id, "counts"))
	r = cli(t, c, "", "state", "get", "--store", "nope", id, "k")
	require.Equal(t, admin.ExitError, r.code)
	require.Contains(t, r.stderr, `store "nope" does not exist`)
	r = cli(t, c, "", "state", "get", "--store", "Bad", id, "k")
	require.Equal(t, admin.ExitUsage, r.code)
	// The pending timers of k: replaced, cancelled and other keys' left
	// out, in due order.
	r = cli(t, c, "", "state", "timers", "--json", "--partition", "1", id, "k")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var tl admin.TimerList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tl))
	require.Equal(t, changelog.TimersTopic(id), tl.Topic)
	require.NotNil(t, tl.StreamTime)
	require.Equal(t, int64(6), *tl.StreamTime)
	require.Len(t, tl.Timers, 2)
	require.Equal(t, admin.TimerRecord{Name: "t", Kind: "event", DueMs: 7, Due: time.UnixMilli(7).UTC()}, tl.Timers[0])
	require.Equal(t, "\x00ttl", tl.Timers[1].Name)
	require.Equal(t, "wall", tl.Timers[1].Kind)
	require.Equal(t, int64(9000), tl.Timers[1].DueMs)
	r = cli(t, c, "", "state", "timers", "--partition", "1", id, "k")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "(ttl)")
	require.Contains(t, r.stdout, "1970-01-01T00:00:09Z")
	r = cli(t, c, "", "state", "timers", "--json", "--partition", "0", id, "k")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var tl0 admin.TimerList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tl0))
	require.Empty(t, tl0.Timers, "no timers on partition 0")
	require.Nil(t, tl0.StreamTime)

	r = cli(t, c, "", "state", "get", "--partition", "0", id, "k")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, "1\n", r.stdout, "the default store is unchanged")
}

// TestResetStateDeletesEveryStore: reset --state deletes the changelog of
// every store of the application with the default one (a timer or named
// store left behind would come back on the next start), and leaves the
// changelog of another application whose name extends this one's.
func TestResetStateDeletesEveryStore(t *testing.T) {
	ctx := context.Background()
	c := kafkatest.New(t)
	id, in := kafkatest.Name("app"), kafkatest.Name("in")
	c.CreateTopic(t, in, 1)
	own := []string{changelog.Topic(id), changelog.StoreTopic(id, "counts"), changelog.TimersTopic(id)}
	other := changelog.Topic(id + "-other")
	for _, tp := range append(own, other) {
		c.CreateTopic(t, tp, 1)
	}
	for _, g := range []string{id, id + "-other"} {
		var offs kadm.Offsets
		offs.Add(kadm.Offset{Topic: in, Partition: 0, At: 0})
		_, err := c.Adm.CommitOffsets(ctx, g, offs)
		require.NoError(t, err)
	}
	r := cli(t, c, "", "reset", id, "--state", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	for _, tp := range own {
		require.Contains(t, r.stdout, "deleted topic "+tp)
	}
	require.NotContains(t, r.stdout, "deleted topic "+other)
	td, err := c.Adm.ListTopics(ctx, append(own, other)...)
	require.NoError(t, err)
	for _, tp := range own {
		d, ok := td[tp]
		require.True(t, !ok || d.Err != nil, "%s deleted", tp)
	}
	require.NoError(t, td[other].Err, "the other application's changelog stays")
}

// TestStateTimersShowCarriedDue: state timers lists a timer the key's
// state carries (process.Stamp.Timers) at the due time of the stamp of
// the key's last state record, not at the earlier time (or the clock the
// timer had before its last set) the timer store holds; a timer the
// stamp does not carry, or carries earlier, at the timer store's.
func TestStateTimersShowCarriedDue(t *testing.T) {
	c := kafkatest.New(t)
	id := kafkatest.Name("app")
	for _, tp := range []string{changelog.Topic(id), changelog.TimersTopic(id)} {
		c.CreateTopic(t, tp, 1)
	}
	withStamp := func(v string, s process.Stamp) *kgo.Record {
		return &kgo.Record{Topic: changelog.Topic(id), Key: []byte("k"), Value: []byte(v),
			Headers: []kgo.RecordHeader{{Key: changelog.StampHeader, Value: stamp.Append(nil, s)}}}
	}
	c.Produce(t,
		withStamp("1", process.Stamp{Timers: []process.Timer{{Name: "a", Kind: process.EventTime, Due: 90}}}),
		withStamp("2", process.Stamp{Kind: process.EventTime, At: 3, Timers: []process.Timer{
			{Name: "a", Kind: process.EventTime, Due: 50},
			{Name: "b", Kind: process.EventTime, Due: 5},
			{Name: "w", Kind: process.EventTime, Due: 70},
		}}),
		&kgo.Record{Topic: changelog.TimersTopic(id), Key: store.TimerKey([]byte("k"), "a"), Value: store.TimerValue(1, 10)},
		&kgo.Record{Topic: changelog.TimersTopic(id), Key: store.TimerKey([]byte("k"), "b"), Value: store.TimerValue(1, 20)},
		&kgo.Record{Topic: changelog.TimersTopic(id), Key: store.TimerKey([]byte("k"), "c"), Value: store.TimerValue(1, 30)},
		&kgo.Record{Topic: changelog.TimersTopic(id), Key: store.TimerKey([]byte("k"), "w"), Value: store.TimerValue(2, 40)},
	)
	r := cli(t, c, "", "state", "timers", "--json", id, "k")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var tl admin.TimerList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tl))
	var got []string
	for _, tr := range tl.Timers {
		got = append(got, fmt.Sprintf("%s %s %d", tr.Name, tr.Kind, tr.DueMs))
	}
	require.Equal(t, []string{"b event 20", "c event 30", "a event 50", "w event 70"}, got)
}
