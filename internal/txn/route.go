package txn

import (
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
)

// Routing says where a Producer's records go.
type Routing struct {
	// Changelog is the topic whose records go to their explicit
	// partition; empty: none (a stateless owner).
	Changelog string
	// Stores are further changelog topics (of named stores and timers)
	// whose records go to their explicit partition, as Changelog's.
	Stores []string
	// Explicit sends every record whose Partition is 0 or more to that
	// partition (a transformer's outputs: -1 asks for the partitioner).
	// Without it, only the changelog's records keep their partition.
	Explicit bool
	// ByTopic are the partitioners of topics: the partition of a record
	// of the topic without an explicit partition. Other topics' records
	// are partitioned like Kafka's default partitioner does (murmur2 of
	// the key; records without a key stick to a partition per batch).
	ByTopic map[string]func(key []byte, partitions int32) int32
}

// router is the kgo.Partitioner of a Routing. A record whose partition is
// out of its topic's range, or whose topic's partitioner panicked, is
// failed by kgo; the router remembers it in bad (a failure) so that the
// transaction's error is an *flechtwerk.OutputError.
type router struct {
	rt  Routing
	bad *sync.Map // *kgo.Record -> failure
}

func (r router) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == r.rt.Changelog && topic != "" || slices.Contains(r.rt.Stores, topic) {
		return manual.ForTopic(topic)
	}
	return &topicRouter{
		explicit: r.rt.Explicit,
		fn:       r.rt.ByTopic[topic],
		hashed:   hashed.ForTopic(topic).(topicHashed),
		bad:      r.bad,
	}
}

// topicHashed is kgo's key partitioner for one topic (a sticky one for
// records without key).
type topicHashed interface {
	kgo.TopicPartitioner
	kgo.TopicPartitionerOnNewBatch
}

// topicRouter partitions one topic's records. kgo holds the topic's
// partitioner lock across OnNewBatch and the call of Partition that
// follows it (it does for every partitioner with OnNewBatch), so
// repick and wasExplicit need no lock of their own.
type topicRouter struct {
	explicit bool
	fn       func(key []byte, partitions int32) int32
	hashed   topicHashed
	bad      *sync.Map

	// repick: OnNewBatch was called; the next Partition is of the same
	// record, whose Partition kgo already set to its first pick.
	repick      bool
	wasExplicit bool
}

func (t *topicRouter) RequiresConsistency(r *kgo.Record) bool {
	return t.explicit && r.Partition >= 0 || t.fn != nil || t.hashed.RequiresConsistency(r)
}

func (t *topicRouter) OnNewBatch() {
	t.repick = true
	t.hashed.OnNewBatch()
}

func (t *topicRouter) Partition(r *kgo.Record, n int) int {
	explicit := t.explicit && r.Partition >= 0
	if t.repick {
		t.repick = false
		explicit = t.wasExplicit
	}
	t.wasExplicit = explicit
	var p int32
	switch {
	case explicit:
		p = r.Partition
	case t.fn != nil:
		var perr error
		p, perr = partition(t.fn, r.Key, int32(n))
		if perr != nil {
			// kgo fails the record for the partition out of range;
			// the transaction's error is the panic's.
			r.Partition = -1
			t.bad.Store(r, failure{partitions: int32(n), err: perr})
			return -1
		}
		r.Partition = p // named by the error when out of range
	default:
		return t.hashed.Partition(r, n)
	}
	if p < 0 || int(p) >= n {
		t.bad.Store(r, failure{partitions: int32(n)})
	}
	return int(p)
}

// failure is why the router failed a record: its partition is out of
// the topic's partitions, or the topic's partitioner panicked (err).
type failure struct {
	partitions int32
	err        error
}

// partition calls fn, recovering a panic into a *flechtwerk.PanicError:
// it runs on kgo's goroutine, where a panic would end the process.
func partition(fn func([]byte, int32) int32, key []byte, n int32) (p int32, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return fn(key, n), nil
}

// outputError returns the *flechtwerk.OutputError of r when the router
// failed it for its partition, else nil.
func (r router) outputError(rec *kgo.Record) error {
	v, ok := r.bad.LoadAndDelete(rec)
	if !ok {
		return nil
	}
	f := v.(failure)
	return &flechtwerk.OutputError{Code: flechtwerk.CodeOutputPartition, Topic: rec.Topic,
		Partition: rec.Partition, Partitions: f.partitions, Err: f.err}
}
