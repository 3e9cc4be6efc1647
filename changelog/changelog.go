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
	"github.com/flechtwerk/flechtwerk/internal/authz"
	"github.com/flechtwerk/flechtwerk/internal/restore"
	"github.com/flechtwerk/flechtwerk/internal/retry"
	"github.com/flechtwerk/flechtwerk/store"
)

// ResetMarker is the metadata of a committed input offset that resets an
// application's state along with its offsets ("flechtwerk reset APP
// --state" commits its offsets with it): such an offset accounts for no
// state, so a stateful runner whose changelog is missing starts from empty
// state there instead of refusing with CHANGELOG_MISSING. A reset made by
// other means (kadm.Offset.Metadata) can set it too. The runner's own
// commits carry other metadata, so the mark lasts until the first commit
// of the partition after the reset.
const ResetMarker = "flechtwerk:state-reset"

// Topic returns the changelog topic of an application: "{applicationID}-changelog".
func Topic(applicationID string) string { return applicationID + "-changelog" }

// StoreTopic returns the changelog topic of the named store name of an
// application: "{applicationID}-{name}-changelog". Each named store has
// its own topic, with the partitions and configuration of Topic's: a
// compacted topic is compacted by key, so stores sharing one would need
// key prefixes that existing keys cannot be guaranteed to avoid.
//
// The names are not unique across applications, as in Kafka Streams:
// StoreTopic("a", "x") is Topic("a-x"), and StoreTopic("a", "b-c") is
// StoreTopic("a-b", "c"). Two applications whose names meet this way share
// a topic and corrupt each other's state; choose application ids and
// store names that do not.
func StoreTopic(applicationID, name string) string {
	return applicationID + "-" + name + "-changelog"
}

// TimersName is the name of the timer store (store.Options.Timers) of a
// task whose processor sets timers; no user store may take it.
const TimersName = "timers"

// TimersTopic returns the changelog topic of the timer stores of an
// application: StoreTopic(applicationID, TimersName).
func TimersTopic(applicationID string) string { return StoreTopic(applicationID, TimersName) }

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
	raced := func(err error) bool { return errors.Is(err, kerr.TopicAlreadyExists) }
	p := retry.Doubling(20*time.Millisecond, time.Second, raced)
	p.MaxAttempts = 21
	var last error // the raw error of the last attempt's create
	err := p.Do(ctx, func() error {
		last = nil
		details, err := adm.ListTopics(uncached(ctx), topic)
		if err != nil {
			return fmt.Errorf("changelog: describing %s: %w", topic, acl(err, "Describe", topic))
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
		// TOPIC_ALREADY_EXISTS: another instance created it; wait
		// until it is visible, then check it.
		last = err
		return fmt.Errorf("changelog: creating %s with %d partitions: %w", topic, partitions, acl(err, "Create", topic))
	}, nil)
	if err != nil && last != nil && raced(last) && ctx.Err() != nil {
		return fmt.Errorf("changelog: creating %s: %w", topic, errors.Join(last, ctx.Err()))
	}
	return err
}

func check(ctx context.Context, adm *kadm.Client, topic string, have, want int32) error {
	if have != want {
		return flechtwerk.Errorf(flechtwerk.CodeChangelogMismatch, "topic "+topic,
			"changelog has %d partitions, inputs have %d; repartitioning state needs a migration (a new application id, or delete the changelog)", have, want)
	}
	// A topic another instance just created can be unknown to the broker
	// asked for its configs for a moment (its metadata lags): look again
	// for up to about 15 seconds.
	var rc kadm.ResourceConfig
	unknown := func(err error) bool { return errors.Is(err, kerr.UnknownTopicOrPartition) }
	p := retry.Doubling(20*time.Millisecond, time.Second, unknown)
	p.MaxAttempts = 21
	var last error
	err := p.Do(ctx, func() error {
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err == nil {
			rc, err = rcs.On(topic, nil)
		}
		if err == nil {
			err = rc.Err
		}
		last = err
		return err
	}, nil)
	if err != nil {
		if unknown(last) && ctx.Err() != nil {
			return fmt.Errorf("changelog: describing configs of %s: %w", topic, errors.Join(last, ctx.Err()))
		}
		return fmt.Errorf("changelog: describing configs of %s: %w", topic, acl(last, "DescribeConfigs", topic))
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
		if len(w.Stamp) > 0 {
			r.Headers = []kgo.RecordHeader{{Key: StampHeader, Value: w.Stamp}}
		}
	}
	return r
}

// StampHeader is the header of a changelog record that carries its put's
// stamp (store.Write.Stamp), so that a restore keeps it.
const StampHeader = "flechtwerk.stamp"

// Restore restores st from partition of topic and returns the number of
// records it applied: Recover, for callers that need only the count.
func Restore(ctx context.Context, adm *kadm.Client, topic string, partition int32, st *store.Store, opts ...kgo.Opt) (int, error) {
	res, err := Recover(ctx, adm, topic, partition, st, opts...)
	return res.Records, err
}

// Result says what Recover did.
type Result struct {
	// Records is the number of data records applied.
	Records int
	// From and To are the replayed offsets: from the checkpoint (warm) or
	// the log start (full) up to the last stable offset.
	From, To int64
	// Full is set when the store was wiped and restored from the log
	// start; Reason then says why its checkpoint was not used.
	Full   bool
	Reason string
}

// Recover brings st up to the last stable offset of partition of topic,
// reading with read_committed isolation, and records the checkpoint as it
// goes (so that an interrupted restore resumes where it stopped). opts are
// the client options (seed brokers, TLS, SASL) for the restore client.
//
// When st holds a checkpoint of the same topic ID that lies between the
// log start and the last stable offset and is younger than the topic's
// delete.retention.ms (less a tenth, for the time the restore takes and
// for clocks), Recover replays only from the checkpoint. Otherwise it wipes
// st (store.Reset) and restores from the log start; Result.Reason says
// why. A checkpoint is unusable when:
//   - the topic ID differs: the topic was deleted and recreated, its
//     offsets mean other records;
//   - it is ahead of the last stable offset: the store reflects records
//     the changelog no longer has (a store copied from elsewhere, or a
//     broker that lost acknowledged data);
//   - it is below the log start: records after it were deleted;
//   - it is older than delete.retention.ms: a tombstone written after the
//     checkpoint may have been cleaned away, and its key would survive.
//
// Recover must be called after the task's producer was fenced: then no
// transaction of the partition's only writer is open and the last stable
// offset is final.
//
// Recover ends when its fetch position reaches the last stable offset
// listed at the start, not when it has seen the record just below it: that
// record may never reach a read_committed reader (aborted data of a
// transaction whose abort marker lies above the last stable offset, because
// another producer's transaction is still open; or a record or marker the
// log cleaner removed). Read through a consumer, which reports records but
// not its position, such a restore would wait forever. Recover therefore
// fetches itself and advances over aborted batches and control records.
func Recover(ctx context.Context, adm *kadm.Client, topic string, partition int32, st *store.Store, opts ...kgo.Opt) (Result, error) {
	res, err := restore.Recover(ctx, adm, topic, partition, st, opts...)
	return Result(res), err
}

// NextOffset returns the offset just after the last record of recs to
// partition of topic, and false when recs hold none: the checkpoint of a
// committed transaction's state writes (store.ApplyThrough). recs must be
// produced (their offsets set).
func NextOffset(recs []*kgo.Record, topic string, partition int32) (int64, bool) {
	next, ok := int64(0), false
	for _, r := range recs {
		if r.Topic == topic && r.Partition == partition && r.Offset+1 > next {
			next, ok = r.Offset+1, true
		}
	}
	return next, ok
}

// uncached makes kadm's metadata requests skip the client's metadata cache
// (kadm issues the request directly when authorized operations are asked
// for).
func uncached(ctx context.Context) context.Context { return kadm.WithAuthorizedOps(ctx) }

// acl names the ACL operation on the changelog topic a refused request
// needed (see internal/authz).
func acl(err error, operation, topic string) error {
	return authz.Wrap(err, operation, map[authz.Resource]string{authz.Topic: topic})
}
