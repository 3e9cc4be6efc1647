package changelog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/store"
)

// Topic returns the changelog topic of an application: "{applicationID}-changelog".
func Topic(applicationID string) string { return applicationID + "-changelog" }

// Ensure creates the changelog topic compacted with exactly partitions
// partitions, or checks an existing one: a different partition count or a
// cleanup policy without compaction is a *flechtwerk.ConfigError with
// CodeChangelogMismatch. replication -1 uses the broker default.
func Ensure(ctx context.Context, adm *kadm.Client, topic string, partitions int32, replication int16) error {
	for attempt := 0; ; attempt++ {
		details, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return fmt.Errorf("changelog: describing %s: %w", topic, err)
		}
		if d, ok := details[topic]; ok && d.Err == nil {
			return check(ctx, adm, topic, int32(len(d.Partitions)), partitions)
		}
		resp, err := adm.CreateTopic(ctx, partitions, replication, map[string]*string{
			"cleanup.policy": kadm.StringPtr("compact"),
		}, topic)
		if err == nil {
			return nil
		}
		if errors.Is(err, kerr.TopicAlreadyExists) && attempt < 3 {
			continue // another instance created it: check it
		}
		_ = resp
		return fmt.Errorf("changelog: creating %s with %d partitions: %w", topic, partitions, err)
	}
}

func check(ctx context.Context, adm *kadm.Client, topic string, have, want int32) error {
	if have != want {
		return flechtwerk.Errorf(flechtwerk.CodeChangelogMismatch, "topic "+topic,
			"changelog has %d partitions, inputs have %d; repartitioning state needs a migration (a new application id, or delete the changelog)", have, want)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return fmt.Errorf("changelog: describing configs of %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return fmt.Errorf("changelog: describing configs of %s: %w", topic, err)
	}
	if rc.Err != nil {
		return fmt.Errorf("changelog: describing configs of %s: %w", topic, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil && !containsCompact(*c.Value) {
			return flechtwerk.Errorf(flechtwerk.CodeChangelogMismatch, "topic "+topic,
				"changelog cleanup.policy is %q; it must include compact", *c.Value)
		}
	}
	return nil
}

func containsCompact(policy string) bool {
	for i := 0; i+len("compact") <= len(policy); i++ {
		if policy[i:i+len("compact")] == "compact" {
			return true
		}
	}
	return false
}

// Record returns the changelog record of one state write of task partition.
// A delete is a tombstone.
func Record(topic string, partition int32, w store.Write) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: partition, Key: w.Key}
	if !w.Delete {
		r.Value = w.Value
		if r.Value == nil {
			r.Value = []byte{}
		}
	}
	return r
}

// Restore reads partition of topic with read_committed isolation from the
// log start up to the last stable offset and applies it to st in batches.
// It returns the number of records applied. opts are the client options
// (seed brokers, TLS, SASL) for the restore consumer.
//
// Restore must be called after the task's producer was fenced: then no
// transaction of the partition's only writer is open, the last stable
// offset equals the high watermark, and the record just below it is a
// transaction marker or a committed record, which the restore consumer
// (keeping control records) always sees.
func Restore(ctx context.Context, adm *kadm.Client, topic string, partition int32, st *store.Store, opts ...kgo.Opt) (int, error) {
	start, err := listOffset(ctx, adm.ListStartOffsets, topic, partition)
	if err != nil {
		return 0, fmt.Errorf("changelog: start offset of %s/%d: %w", topic, partition, err)
	}
	end, err := listOffset(ctx, adm.ListCommittedOffsets, topic, partition)
	if err != nil {
		return 0, fmt.Errorf("changelog: last stable offset of %s/%d: %w", topic, partition, err)
	}
	if end <= start {
		return 0, nil
	}
	return restoreRange(ctx, topic, partition, start, end, st, opts...)
}

// listOffset lists one partition's offset, retrying while the topic is not
// yet known to the broker answering (a topic just created) or the error is
// retriable.
func listOffset(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string, partition int32) (int64, error) {
	backoff := 20 * time.Millisecond
	for {
		offs, err := list(ctx, topic)
		if err == nil {
			o, ok := offs.Lookup(topic, partition)
			switch {
			case ok && o.Err == nil:
				return o.Offset, nil
			case ok:
				err = o.Err
			default:
				err = kerr.UnknownTopicOrPartition
				if o, ok := offs.Lookup(topic, -1); ok && o.Err != nil {
					err = o.Err
				}
			}
		}
		if !errors.Is(err, kerr.UnknownTopicOrPartition) && !kerr.IsRetriable(err) {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func restoreRange(ctx context.Context, topic string, partition int32, from, end int64, st *store.Store, opts ...kgo.Opt) (int, error) {
	all := append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			topic: {partition: kgo.NewOffset().At(from)},
		}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return 0, fmt.Errorf("changelog: restore consumer for %s/%d: %w", topic, partition, err)
	}
	defer cl.Close()

	applied := 0
	batch := make([]store.Write, 0, 1024)
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return applied, fmt.Errorf("changelog: restoring %s/%d: %w", topic, partition, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("changelog: restoring %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return applied, ferr
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end-1 {
				done = true
			}
			if r.Offset >= end || r.Attrs.IsControl() {
				return
			}
			w := store.Write{Key: r.Key}
			if r.Value == nil {
				w.Delete = true
			} else {
				w.Value = r.Value
			}
			batch = append(batch, w)
		})
		if len(batch) >= 1024 || done {
			if err := st.Apply(batch); err != nil {
				return applied, err
			}
			applied += len(batch)
			batch = batch[:0]
		}
		if done {
			return applied, nil
		}
	}
}
