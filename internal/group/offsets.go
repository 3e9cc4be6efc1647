package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/internal/retry"
)

// offsetFetchPatience bounds how long a committed-offset fetch waits for a
// coordinator that is not ready before the fetch fails (a sink ends Run with
// an OffsetFetchError then).
const offsetFetchPatience = 30 * time.Second

// FetchCommitted fetches the group's committed offsets of ts, retrying while
// the coordinator is not ready (RetryNotReady).
func FetchCommitted(ctx context.Context, adm *kadm.Client, log *slog.Logger, g string, ts []string) (kadm.OffsetResponses, error) {
	var resps kadm.OffsetResponses
	err := RetryNotReady(ctx, log, g, 50*time.Millisecond, func() error {
		var err error
		resps, err = adm.FetchOffsetsForTopics(ctx, g, ts...)
		if err == nil {
			// A partition's error can be the coordinator's too.
			resps.Each(func(o kadm.OffsetResponse) {
				if err == nil && CoordinatorNotReady(o.Err) {
					err = o.Err
				}
			})
		}
		return err
	})
	return resps, err
}

// RetryNotReady calls fetch, a committed-offset fetch of group g, until it
// succeeds, retrying (from backoff, doubling up to 1s) while the
// coordinator is not ready: on a fresh cluster the first group lookup
// answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists, and a
// coordinator that is loading or moving answers
// COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR. Other errors, and a
// coordinator still not ready after offsetFetchPatience, are returned.
func RetryNotReady(ctx context.Context, log *slog.Logger, g string, backoff time.Duration, fetch func() error) error {
	p := retry.Doubling(backoff, time.Second, CoordinatorNotReady)
	p.MaxElapsed = offsetFetchPatience
	var last error
	err := p.Do(ctx, func() error { last = fetch(); return last }, func(err error, wait time.Duration) {
		log.Debug("offset fetch: coordinator not ready, retrying", "group", g, "err", err, "backoff", wait)
	})
	if err == nil {
		return nil
	}
	err = last // not ctx's cause: the fetch's own error
	if CoordinatorNotReady(err) {
		if ctx.Err() != nil {
			return err // ctx ended during a wait
		}
		err = fmt.Errorf("coordinator not ready after %v: %w", offsetFetchPatience, err)
	}
	return ACL(err, g)
}

// CoordinatorNotReady reports a transient group coordinator error, or
// UNSTABLE_OFFSET_COMMIT: a require-stable fetch met a transaction with
// offsets of the group that is still being completed (right after a fence
// aborted it).
func CoordinatorNotReady(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.UnstableOffsetCommit)
}

// FetchTaskCommitted fetches the group's committed offsets of partition p
// of every topic in ts, require-stable, retrying like FetchCommitted: only
// the task's own partitions are asked for, so a transaction of another
// task that is completing (UNSTABLE_OFFSET_COMMIT on its partitions) does
// not hold the answer back. A partition without a commit has offset -1.
func FetchTaskCommitted(ctx context.Context, cl *kgo.Client, log *slog.Logger, g string, ts []string, p int32) (map[string]int64, error) {
	var offs map[string]int64
	err := RetryNotReady(ctx, log, g, 20*time.Millisecond, func() error {
		var err error
		offs, err = fetchTaskCommittedOnce(ctx, cl, g, ts, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return offs, nil
}

func fetchTaskCommittedOnce(ctx context.Context, cl *kgo.Client, g string, ts []string, p int32) (map[string]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = g
	req.RequireStable = true
	for _, topic := range ts {
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = topic
		rt.Partitions = []int32{p}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	offs := map[string]int64{}
	take := func(topic string, partition int32, offset int64, code int16) error {
		if partition != p || !slices.Contains(ts, topic) {
			return nil
		}
		if err := kerr.ErrorForCode(code); err != nil {
			return fmt.Errorf("topic %s partition %d: %w", topic, partition, err)
		}
		offs[topic] = offset
		return nil
	}
	if len(resp.Groups) > 0 {
		gr := resp.Groups[0]
		if err := kerr.ErrorForCode(gr.ErrorCode); err != nil {
			return nil, err
		}
		for _, t := range gr.Topics {
			for _, rp := range t.Partitions {
				if err := take(t.Topic, rp.Partition, rp.Offset, rp.ErrorCode); err != nil {
					return nil, err
				}
			}
		}
	} else {
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if err := take(t.Topic, rp.Partition, rp.Offset, rp.ErrorCode); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, topic := range ts {
		if _, ok := offs[topic]; !ok {
			return nil, fmt.Errorf("topic %s partition %d: the coordinator's answer omits it", topic, p)
		}
	}
	return offs, nil
}

// Lag returns the last stable offset minus group's committed offset (0
// without a commit) of every partition of ts: the lag of the group,
// whichever member runs the partition.
func Lag(ctx context.Context, adm *kadm.Client, group string, ts []string) (map[imetrics.TP]int64, error) {
	lso, err := adm.ListCommittedOffsets(ctx, ts...)
	if err != nil {
		return nil, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := make(map[imetrics.TP]int64)
	lso.Each(func(end kadm.ListedOffset) {
		if end.Err != nil {
			return
		}
		at := int64(0)
		if o, ok := committed.Lookup(end.Topic, end.Partition); ok && o.Err == nil && o.At >= 0 {
			at = o.At
		}
		out[imetrics.TP{Topic: end.Topic, Partition: end.Partition}] = max(end.Offset-at, 0)
	})
	return out, nil
}
