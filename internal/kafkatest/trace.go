package kafkatest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TraceTransactions records, on the embedded broker, every transactional
// request in the order the broker handles it: InitProducerId,
// AddOffsetsToTxn, each produce batch of a transactional producer
// (partition, producer id, epoch, first sequence, record count),
// TxnOffsetCommit and EndTxn. If the test fails, the trace is logged; a
// sequence or epoch error of a producer can then be read against what the
// broker was sent. On KAFKA_BROKERS it does nothing.
func (c *Cluster) TraceTransactions(t testing.TB) {
	t.Helper()
	if c.fake == nil {
		return
	}
	tr := &txnTrace{start: time.Now()}
	fc := c.fake
	fc.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		tr.observe(req)
		return nil, nil, false // observed only: the broker handles it
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		names := c.topicNames()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		t.Logf("transactional requests the broker handled (%d):", len(tr.lines))
		for _, l := range tr.lines {
			t.Log(l.format(names))
		}
	})
}

// topicNames maps topic IDs to names, for a trace of produce v13 (topics
// by ID).
func (c *Cluster) topicNames() map[[16]byte]string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[[16]byte]string{}
	td, err := c.Adm.ListTopics(ctx)
	if err != nil {
		return out
	}
	for name, d := range td {
		out[d.ID] = name
	}
	return out
}

type txnTrace struct {
	mu    sync.Mutex
	start time.Time
	lines []traceLine
}

type traceLine struct {
	at      time.Duration
	text    string
	batches []traceBatch
}

type traceBatch struct {
	topic     string
	topicID   [16]byte
	partition int32
	text      string
}

func (l traceLine) format(names map[[16]byte]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%9.3fs %s", l.at.Seconds(), l.text)
	for _, pb := range l.batches {
		topic := pb.topic
		if topic == "" {
			topic = names[pb.topicID]
		}
		fmt.Fprintf(&b, " [%s/%d %s]", topic, pb.partition, pb.text)
	}
	return b.String()
}

func (tr *txnTrace) add(l traceLine) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	l.at = time.Since(tr.start)
	tr.lines = append(tr.lines, l)
}

func (tr *txnTrace) observe(req kmsg.Request) {
	switch r := req.(type) {
	case *kmsg.InitProducerIDRequest:
		id := "<none>"
		if r.TransactionalID != nil {
			id = *r.TransactionalID
		}
		tr.add(traceLine{text: fmt.Sprintf("InitProducerId %s producer=%d epoch=%d", id, r.ProducerID, r.ProducerEpoch)})
	case *kmsg.AddOffsetsToTxnRequest:
		tr.add(traceLine{text: fmt.Sprintf("AddOffsetsToTxn %s producer=%d epoch=%d group=%s", r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Group)})
	case *kmsg.TxnOffsetCommitRequest:
		tr.add(traceLine{text: fmt.Sprintf("TxnOffsetCommit %s producer=%d epoch=%d", r.TransactionalID, r.ProducerID, r.ProducerEpoch)})
	case *kmsg.EndTxnRequest:
		tr.add(traceLine{text: fmt.Sprintf("EndTxn v%d %s producer=%d epoch=%d commit=%v", r.Version, r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Commit)})
	case *kmsg.ProduceRequest:
		if r.TransactionID == nil {
			return
		}
		l := traceLine{text: fmt.Sprintf("Produce v%d %s", r.Version, *r.TransactionID)}
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				pb := traceBatch{topic: rt.Topic, topicID: rt.TopicID, partition: rp.Partition}
				var rb kmsg.RecordBatch
				if err := rb.ReadFrom(rp.Records); err != nil {
					pb.text = "unreadable batch"
				} else {
					pb.text = fmt.Sprintf("producer=%d epoch=%d seq=%d records=%d", rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence, rb.NumRecords)
				}
				l.batches = append(l.batches, pb)
			}
		}
		tr.add(l)
	}
}
