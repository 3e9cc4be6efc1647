package changelog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/lso"
	"github.com/flechtwerk/flechtwerk/store"
)

// Topic returns the changelog topic of an application: "{applicationID}-changelog".
func Topic(applicationID string) string { return applicationID + "-changelog" }

// Ensure creates the changelog topic compacted with exactly partitions
// partitions, or checks an existing one: a different partition count or a
// cleanup policy without compaction is a *flechtwerk.ConfigError with
// CodeChangelogMismatch. replication -1 uses the broker default.
//
// Instances that start together race to create the topic: the losers get
// TOPIC_ALREADY_EXISTS while the topic may not yet show in the metadata of
// the broker they ask, so they back off and look again (for up to about
// 15 seconds) before checking it. The look bypasses kadm's metadata cache,
// which would answer "unknown topic" for MetadataMinAge (5s) after the
// first look.
func Ensure(ctx context.Context, adm *kadm.Client, topic string, partitions int32, replication int16) error {
	backoff := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		details, err := adm.ListTopics(uncached(ctx), topic)
		if err != nil {
			return fmt.Errorf("changelog: describing %s: %w", topic, err)
		}
		if d, ok := details[topic]; ok && d.Err == nil {
			return check(ctx, adm, topic, int32(len(d.Partitions)), partitions)
		}
		_, err = adm.CreateTopic(ctx, partitions, replication, map[string]*string{
			"cleanup.policy": kadm.StringPtr("compact"),
		}, topic)
		if err == nil {
			return nil
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) || attempt >= 20 {
			return fmt.Errorf("changelog: creating %s with %d partitions: %w", topic, partitions, err)
		}
		// Another instance created it: wait until it is visible, then
		// check it.
		select {
		case <-ctx.Done():
			return fmt.Errorf("changelog: creating %s: %w", topic, errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
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
		if c.Key == "cleanup.policy" && c.Value != nil && !compactOnly(*c.Value) {
			return flechtwerk.Errorf(flechtwerk.CodeChangelogMismatch, "topic "+topic,
				"changelog cleanup.policy is %q; it must be exactly compact (delete would drop state older than retention.ms)", *c.Value)
		}
	}
	return nil
}

// compactOnly reports whether a cleanup.policy value is compaction alone.
func compactOnly(policy string) bool {
	for _, p := range strings.Split(policy, ",") {
		if strings.TrimSpace(p) != "compact" {
			return false
		}
	}
	return policy != ""
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
// (seed brokers, TLS, SASL) for the restore client.
//
// Restore must be called after the task's producer was fenced: then no
// transaction of the partition's only writer is open and the last stable
// offset is final.
//
// Restore ends when its fetch position reaches the last stable offset
// listed at the start, not when it has seen the record just below it: that
// record may never reach a read_committed reader (aborted data of a
// transaction whose abort marker lies above the last stable offset, because
// another producer's transaction is still open; or a record or marker the
// log cleaner removed). Read through a consumer, which reports records but
// not its position, such a restore would wait forever. Restore therefore
// fetches itself and advances over aborted batches and control records.
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
	// A topic unknown for this long is not being created: it is missing
	// (e.g. a changelog partition beyond its count).
	unknownUntil := time.Now().Add(30 * time.Second)
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
		if errors.Is(err, kerr.UnknownTopicOrPartition) && time.Now().After(unknownUntil) {
			return 0, fmt.Errorf("partition %d of %s still unknown after 30s: %w", partition, topic, err)
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
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("changelog: restore client for %s/%d: %w", topic, partition, err)
	}
	defer cl.Close()
	var (
		applied int
		writes  []store.Write
	)
	prog := newProgress(ctx, topic, partition, from, end)
	err = lso.ReadRange(ctx, cl, topic, partition, from, end, func(rs []*kgo.Record) error {
		writes = writes[:0]
		for _, r := range rs {
			w := store.Write{Key: r.Key}
			if r.Value == nil {
				w.Delete = true
			} else {
				w.Value = r.Value
			}
			writes = append(writes, w)
		}
		if err := st.Apply(writes); err != nil {
			return err
		}
		applied += len(writes)
		prog.report(rs)
		return nil
	}, func(offset int64, err error) error {
		return fmt.Errorf("changelog: restoring %s/%d at offset %d: %w", topic, partition, offset, err)
	})
	return applied, err
}

// uncached makes kadm's metadata requests skip the client's metadata cache
// (kadm issues the request directly when authorized operations are asked
// for).
func uncached(ctx context.Context) context.Context { return kadm.WithAuthorizedOps(ctx) }
