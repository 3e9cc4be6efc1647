package txn

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
)

func TestRouting(t *testing.T) {
	kafka := kgo.StickyKeyPartitioner(nil).ForTopic("x")
	last := func(_ []byte, n int32) int32 { return n - 1 }
	tests := []struct {
		name     string
		rt       Routing
		topic    string
		rec      kgo.Record
		want     int
		consist  bool
		outRange bool
	}{
		{"changelog keeps its partition", Routing{Changelog: "cl"}, "cl", kgo.Record{Partition: 2, Key: []byte("k")}, 2, true, false},
		{"without Explicit a partition is ignored", Routing{}, "o", kgo.Record{Partition: 2, Key: []byte("k")},
			kafka.Partition(&kgo.Record{Key: []byte("k")}, 8), true, false},
		{"explicit", Routing{Explicit: true}, "o", kgo.Record{Partition: 5, Key: []byte("k")}, 5, true, false},
		{"explicit wins over the topic's partitioner", Routing{Explicit: true, ByTopic: map[string]func([]byte, int32) int32{"o": last}},
			"o", kgo.Record{Partition: 1}, 1, true, false},
		{"-1: murmur2 of the key", Routing{Explicit: true}, "o", kgo.Record{Partition: -1, Key: []byte("k")},
			kafka.Partition(&kgo.Record{Key: []byte("k")}, 8), true, false},
		{"-1: the topic's partitioner", Routing{Explicit: true, ByTopic: map[string]func([]byte, int32) int32{"o": last}},
			"o", kgo.Record{Partition: -1}, 7, true, false},
		{"another topic's partitioner does not apply", Routing{Explicit: true, ByTopic: map[string]func([]byte, int32) int32{"p": last}},
			"o", kgo.Record{Partition: -1, Key: []byte("k")}, kafka.Partition(&kgo.Record{Key: []byte("k")}, 8), true, false},
		{"no key: sticky, not consistent", Routing{Explicit: true}, "o", kgo.Record{Partition: -1}, -2, false, false},
		{"explicit out of range", Routing{Explicit: true}, "o", kgo.Record{Partition: 8}, 8, true, true},
		{"partitioner out of range", Routing{Explicit: true, ByTopic: map[string]func([]byte, int32) int32{"o": func([]byte, int32) int32 { return 9 }}},
			"o", kgo.Record{Partition: -1}, 9, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := router{rt: tc.rt, bad: new(sync.Map)}
			tp := r.ForTopic(tc.topic)
			rec := tc.rec
			rec.Topic = tc.topic
			require.Equal(t, tc.consist, tp.RequiresConsistency(&rec))
			got := tp.Partition(&rec, 8)
			if tc.want == -2 {
				require.True(t, got >= 0 && got < 8)
			} else {
				require.Equal(t, tc.want, got)
			}
			err := r.outputError(&rec)
			if !tc.outRange {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, flechtwerk.ErrOutputPartition)
			var oe *flechtwerk.OutputError
			require.True(t, errors.As(err, &oe))
			require.Equal(t, flechtwerk.OutputError{Code: flechtwerk.CodeOutputPartition, Topic: tc.topic, Partition: int32(tc.want), Partitions: 8}, *oe)
			require.NoError(t, r.outputError(&rec), "reported once")
		})
	}
}

// A panicking partitioner is recovered (it runs on kgo's goroutine): the
// record gets no partition and its error is an *flechtwerk.OutputError
// holding the *flechtwerk.PanicError.
func TestRoutingPartitionerPanics(t *testing.T) {
	r := router{rt: Routing{Explicit: true, ByTopic: map[string]func([]byte, int32) int32{"o": func([]byte, int32) int32 { panic("boom") }}}, bad: new(sync.Map)}
	rec := &kgo.Record{Topic: "o", Partition: -1, Key: []byte("k")}
	require.NotPanics(t, func() { require.Equal(t, -1, r.ForTopic("o").Partition(rec, 4)) })
	err := r.outputError(rec)
	require.ErrorIs(t, err, flechtwerk.ErrOutputPartition)
	var pe *flechtwerk.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom", pe.Value)
	require.ErrorContains(t, err, "output to topic o: the topic's partitioner failed")
}

// kgo calls Partition again for the same record after OnNewBatch, with the
// record's Partition already set to the first pick: a record that asked
// the partitioner gets it again, not its first pick as if explicit.
func TestRoutingRepick(t *testing.T) {
	r := router{rt: Routing{Explicit: true}, bad: new(sync.Map)}
	tp := r.ForTopic("o").(*topicRouter)
	moved := 0
	for range 50 {
		rec := &kgo.Record{Topic: "o", Partition: -1}
		rec.Partition = int32(tp.Partition(rec, 64)) // as kgo's bufferRecord does
		first := rec.Partition
		tp.OnNewBatch()
		if second := tp.Partition(rec, 64); second != int(first) {
			moved++
		}
	}
	require.Positive(t, moved, "a record without key is repartitioned after a new batch, not pinned to its first pick")

	rec := &kgo.Record{Topic: "o", Partition: 3}
	require.Equal(t, 3, tp.Partition(rec, 64))
	tp.OnNewBatch()
	require.Equal(t, 3, tp.Partition(rec, 64), "an explicit record keeps its partition")
}
