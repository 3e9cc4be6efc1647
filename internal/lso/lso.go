package lso

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ReadRange reads partition of topic with read_committed isolation from
// offset from up to (not including) end, the last stable offset listed
// before, and calls fn with the data records below end of every fetch, in
// offset order. An error of fn is returned as it is; ReadRange's own
// errors (a fetch or metadata error that is not retriable, no progress)
// are passed through wrap with the offset reached.
//
// It ends by fetch position, not by the records it sees: the offset of the
// last record below end may hold nothing that is delivered (an aborted
// batch, a transaction marker, or a record, marker or whole batch the log
// cleaner removed). A consumer reports records but not its position, so a
// reader that waits for a record at end-1 can wait forever; ReadRange
// fetches itself and advances over whatever a fetch skips.
//
// The next fetch (and its decoding) runs in a goroutine of ReadRange's
// while fn handles the records of the previous one; fn is called from the
// caller's goroutine, one call at a time, and that goroutine has exited
// when ReadRange returns.
func ReadRange(ctx context.Context, cl *kgo.Client, topic string, partition int32, from, end int64,
	fn func([]*kgo.Record) error, wrap func(offset int64, err error) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []*kgo.Record, 1)
	done := make(chan error, 1)
	go func() {
		done <- fetchRange(ctx, cl, topic, partition, from, end, batches, wrap)
		close(batches)
	}()
	for rs := range batches {
		if err := fn(rs); err != nil {
			cancel()
			for range batches {
			}
			<-done
			return err
		}
	}
	return <-done
}

// fetchRange is the fetch loop of ReadRange: it sends the records of each
// fetch to out.
func fetchRange(ctx context.Context, cl *kgo.Client, topic string, partition int32, from, end int64,
	out chan<- []*kgo.Record, wrap func(offset int64, err error) error) error {
	adm := kadm.NewClient(cl)
	dec := kgo.DefaultDecompressor()
	var (
		offset  = from
		leader  = int32(-1)
		topicID [16]byte
		backoff = 20 * time.Millisecond
		stalls  int
		wrapErr = func(err error) error { return wrap(offset, err) }
	)
	const maxStall = 10
	// wait backs off before retrying a retriable error.
	wait := func(cause error) error {
		select {
		case <-ctx.Done():
			return wrapErr(errors.Join(cause, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
		return nil
	}
	for offset < end {
		if leader < 0 {
			var err error
			leader, topicID, err = partitionLeader(ctx, adm, topic, partition)
			if err != nil {
				if !Retriable(err) {
					return wrapErr(err)
				}
				if err := wait(err); err != nil {
					return err
				}
				continue
			}
		}

		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 500
		req.MinBytes = 1
		req.MaxBytes = 64 << 20
		req.IsolationLevel = 1 // read_committed
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = partition
		rp.FetchOffset = offset
		// Fetches of a few MiB: the next one is on its way while the
		// caller applies the last.
		rp.PartitionMaxBytes = 4 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)

		resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		var part *kmsg.FetchResponseTopicPartition
		if err == nil {
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					if resp.Topics[i].Partitions[j].Partition == partition {
						part = &resp.Topics[i].Partitions[j]
					}
				}
			}
			if part == nil {
				err = kerr.UnknownTopicOrPartition
			} else {
				err = kerr.ErrorForCode(part.ErrorCode)
			}
		}
		if err != nil {
			if ctx.Err() != nil || !Retriable(err) {
				return wrapErr(err)
			}
			leader = -1 // the leader may have moved
			if err := wait(err); err != nil {
				return err
			}
			continue
		}

		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset:         offset,
			IsolationLevel: kgo.ReadCommitted(),
			Topic:          topic,
			Partition:      partition,
		}, part, dec, nil)
		if fp.Err != nil {
			return wrapErr(fp.Err)
		}
		recs := fp.Records
		for len(recs) > 0 && recs[len(recs)-1].Offset >= end {
			recs = recs[:len(recs)-1] // above end: read by whoever continues at end
		}
		if len(recs) > 0 {
			select {
			case out <- recs:
			case <-ctx.Done():
				return wrapErr(ctx.Err())
			}
		}

		switch {
		case next > offset:
			offset, stalls, backoff = next, 0, 20*time.Millisecond
		case len(part.RecordBatches) == 0 && part.LastStableOffset >= end &&
			resp.ThrottleMillis == 0 && part.PreferredReadReplica < 0:
			// Nothing is left between offset and a last stable offset
			// that covers end: the rest below end was removed by the
			// log cleaner. (A throttled response, or one naming a
			// preferred read replica, is empty without meaning that.)
			return nil
		default:
			// A leader whose last stable offset has not caught up with
			// end yet (just elected), a throttled response, or a batch
			// cut short: try again.
			if stalls++; stalls > maxStall {
				return wrapErr(fmt.Errorf("no progress after %d fetches (last stable offset %d, high watermark %d)",
					stalls, part.LastStableOffset, part.HighWatermark))
			}
			if err := wait(nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// partitionLeader returns the leader broker of partition and the topic's ID,
// fresh from the cluster (kadm issues the metadata request directly, not
// from the client's cache, when authorized operations are asked for).
func partitionLeader(ctx context.Context, adm *kadm.Client, topic string, partition int32) (int32, [16]byte, error) {
	md, err := adm.Metadata(kadm.WithAuthorizedOps(ctx), topic)
	if err != nil {
		return -1, [16]byte{}, err
	}
	td, ok := md.Topics[topic]
	if !ok {
		return -1, [16]byte{}, kerr.UnknownTopicOrPartition
	}
	if td.Err != nil {
		return -1, [16]byte{}, td.Err
	}
	pd, ok := td.Partitions[partition]
	if !ok {
		return -1, [16]byte{}, kerr.UnknownTopicOrPartition
	}
	if pd.Err != nil && !errors.Is(pd.Err, kerr.ReplicaNotAvailable) {
		return -1, [16]byte{}, pd.Err
	}
	if pd.Leader < 0 {
		return -1, [16]byte{}, kerr.LeaderNotAvailable
	}
	return pd.Leader, td.ID, nil
}

// Retriable reports whether a fetch or metadata error may pass: leadership
// moves, a topic not yet known everywhere, or a broken connection.
func Retriable(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable || errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)
	}
	return !errors.Is(err, kgo.ErrClientClosed) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
