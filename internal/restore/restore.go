package restore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/authz"
	"github.com/flechtwerk/flechtwerk/internal/lso"
	"github.com/flechtwerk/flechtwerk/internal/retry"
	"github.com/flechtwerk/flechtwerk/store"
)

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
	return recoverStore(ctx, adm, topic, partition, st, true, opts...)
}

// Settle waits until every transaction that is open on partition of
// topic when it is called has ended: until the last stable offset
// reaches the high watermark listed first. A reader whose writer's
// previous owners were not fenced (the shared-producer mode, where the
// group's generation fences instead) calls it before Recover: a
// transaction of such an owner that is still open holds the last stable
// offset below the records committed after it, which Recover would take
// for final and miss. The broker aborts such a transaction after its
// transaction timeout at the latest. ctx bounds the wait.
func Settle(ctx context.Context, adm *kadm.Client, topic string, partition int32) error {
	hwm, err := listOffset(ctx, adm.ListEndOffsets, topic, partition)
	if err != nil {
		return fmt.Errorf("changelog: end offset of %s/%d: %w", topic, partition, acl(err, "Describe", topic))
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		lso, err := listOffset(ctx, adm.ListCommittedOffsets, topic, partition)
		if err != nil {
			return fmt.Errorf("changelog: last stable offset of %s/%d: %w", topic, partition, acl(err, "Describe", topic))
		}
		if lso >= hwm {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("changelog: waiting for the transactions open on %s/%d to end (last stable offset %d, high watermark %d): %w", topic, partition, lso, hwm, ctx.Err())
		case <-tick.C:
		}
	}
}

// ErrUnstable is returned by RecoverUnfenced when the store's checkpoint
// lies above the partition's last stable offset but not above its high
// watermark: the records below the checkpoint are in the log, but a
// transaction of the writer is still open or its markers are not written
// yet. The store was not touched; call RecoverUnfenced again later.
var ErrUnstable = errors.New("changelog: the checkpoint is above the last stable offset (a transaction is not complete yet)")

// RecoverUnfenced is Recover for a reader that did not fence the
// partition's writer (a standby). The writer may have committed a
// transaction whose markers are not written yet (EndTxn does not wait for
// them), so a checkpoint the writer recorded after that commit can lie
// above the last stable offset for a while. Such a checkpoint is not
// wiped: when it is not above the high watermark (the records it covers
// are in the log), RecoverUnfenced returns an error wrapping ErrUnstable
// and leaves st as it was. A checkpoint above the high watermark is ahead
// of the log itself and is wiped, as by Recover.
//
// The checkpoint RecoverUnfenced records at the last stable offset has the
// time of the listing, which an open transaction of the writer may
// predate: the caller moves it back by the writer's transaction timeout.
func RecoverUnfenced(ctx context.Context, adm *kadm.Client, topic string, partition int32, st *store.Store, opts ...kgo.Opt) (Result, error) {
	return recoverStore(ctx, adm, topic, partition, st, false, opts...)
}

func recoverStore(ctx context.Context, adm *kadm.Client, topic string, partition int32, st *store.Store, fenced bool, opts ...kgo.Opt) (Result, error) {
	listed := time.Now()
	id, retention, err := describe(ctx, adm, topic)
	if err != nil {
		return Result{}, fmt.Errorf("changelog: describing %s: %w", topic, err)
	}
	start, err := listOffset(ctx, adm.ListStartOffsets, topic, partition)
	if err != nil {
		return Result{}, fmt.Errorf("changelog: start offset of %s/%d: %w", topic, partition, acl(err, "Describe", topic))
	}
	end, err := listOffset(ctx, adm.ListCommittedOffsets, topic, partition)
	if err != nil {
		return Result{}, fmt.Errorf("changelog: last stable offset of %s/%d: %w", topic, partition, acl(err, "Describe", topic))
	}
	res := Result{From: start, To: end}
	cp, ok := st.Checkpoint()
	if !fenced && ok && cp.TopicID == id && cp.Next > end {
		hwm, err := listOffset(ctx, adm.ListEndOffsets, topic, partition)
		if err != nil {
			return res, fmt.Errorf("changelog: end offset of %s/%d: %w", topic, partition, acl(err, "Describe", topic))
		}
		if cp.Next <= hwm {
			return res, fmt.Errorf("changelog: restoring %s/%d: checkpoint %d, last stable offset %d, high watermark %d: %w",
				topic, partition, cp.Next, end, hwm, ErrUnstable)
		}
	}
	res.Reason = unusable(cp, ok, id, start, end, retention, listed)
	if res.Reason == "" {
		res.From = cp.Next
	} else {
		res.Full = true
		if err := st.Reset(id); err != nil {
			return res, fmt.Errorf("changelog: restoring %s/%d: %w", topic, partition, err)
		}
	}
	if res.From < end {
		n, err := restoreRange(ctx, topic, partition, res.From, end, st, opts...)
		res.Records = n
		if err != nil {
			return res, err
		}
	}
	// Every committed record below end is in the store, and every record
	// at or above end is written after the listing (no transaction of the
	// fenced writer is open).
	if err := st.ApplyCheckpoint(nil, store.Checkpoint{TopicID: id, Next: end, Time: listed}); err != nil {
		return res, fmt.Errorf("changelog: restoring %s/%d: %w", topic, partition, err)
	}
	return res, nil
}

// unusable returns why the checkpoint cp (ok: there is one) cannot be
// replayed from, "" if it can.
func unusable(cp store.Checkpoint, ok bool, id [16]byte, start, end int64, retention time.Duration, now time.Time) string {
	switch {
	case !ok:
		return "no checkpoint (a new store)"
	case cp.TopicID != id:
		return fmt.Sprintf("the checkpoint is of topic ID %x, the changelog's is %x (the topic was recreated)", cp.TopicID, id)
	case cp.Next > end:
		return fmt.Sprintf("the checkpoint %d is ahead of the last stable offset %d", cp.Next, end)
	case cp.Next < start:
		return fmt.Sprintf("the checkpoint %d is below the log start %d", cp.Next, start)
	case cp.Time.IsZero():
		return "the checkpoint has no time"
	}
	if !Trusted(cp.Time, retention, now) {
		age := now.Sub(cp.Time)
		return fmt.Sprintf("the checkpoint is %v old, close to or beyond delete.retention.ms %v (deleted keys may have lost their tombstones)",
			age.Round(time.Millisecond), retention)
	}
	return ""
}

// Describe returns the ID of topic, fresh from the cluster, and its
// delete.retention.ms: how long a tombstone stays readable, the age beyond
// which Recover does not trust a checkpoint.
func Describe(ctx context.Context, adm *kadm.Client, topic string) (id [16]byte, deleteRetention time.Duration, err error) {
	id, deleteRetention, err = describe(ctx, adm, topic)
	if err != nil {
		err = fmt.Errorf("changelog: describing %s: %w", topic, err)
	}
	return id, deleteRetention, err
}

// Trusted reports whether a checkpoint written at cp (its Time) is young
// enough against deleteRetention at now to replay from: Recover's rule,
// with a tenth of the retention kept for the replay and for clocks.
func Trusted(cp time.Time, deleteRetention time.Duration, now time.Time) bool {
	return !cp.IsZero() && now.Sub(cp) <= deleteRetention-deleteRetention/10
}

// defaultDeleteRetention is Kafka's default delete.retention.ms.
const defaultDeleteRetention = 24 * time.Hour

// describe returns the topic's ID, fresh from the cluster, and its
// delete.retention.ms.
func describe(ctx context.Context, adm *kadm.Client, topic string) ([16]byte, time.Duration, error) {
	var id [16]byte
	// Up to 30 seconds: the first failure after 30s is returned (a wait
	// is at most 1s, and none starts that would end past 31s).
	p := retry.Doubling(20*time.Millisecond, time.Second, func(err error) bool {
		return errors.Is(err, kerr.UnknownTopicOrPartition) || kerr.IsRetriable(err)
	})
	p.MaxElapsed = 31 * time.Second
	var last error
	err := p.Do(ctx, func() error {
		details, err := adm.ListTopics(uncached(ctx), topic)
		if err == nil {
			d, ok := details[topic]
			switch {
			case !ok:
				err = kerr.UnknownTopicOrPartition
			case d.Err != nil:
				err = d.Err
			default:
				id = d.ID
			}
		}
		last = err
		return err
	}, nil)
	if err != nil {
		if p.Transient(last) && ctx.Err() != nil {
			return id, 0, errors.Join(last, ctx.Err())
		}
		return id, 0, acl(last, "Describe", topic)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return id, 0, fmt.Errorf("configs: %w", acl(err, "DescribeConfigs", topic))
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return id, 0, fmt.Errorf("configs: %w", acl(err, "DescribeConfigs", topic))
	}
	retention := defaultDeleteRetention
	for _, c := range rc.Configs {
		if c.Key == "delete.retention.ms" && c.Value != nil {
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return id, 0, fmt.Errorf("delete.retention.ms %q: %w", *c.Value, err)
			}
			retention = time.Duration(ms) * time.Millisecond
		}
	}
	return id, retention, nil
}

// listOffset lists one partition's offset, retrying while the topic is not
// yet known to the broker answering (a topic just created) or the error is
// retriable.
func listOffset(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string, partition int32) (int64, error) {
	// A topic unknown for this long is not being created: it is missing
	// (e.g. a changelog partition beyond its count).
	unknownUntil := time.Now().Add(30 * time.Second)
	unknown := func(err error) bool { return errors.Is(err, kerr.UnknownTopicOrPartition) }
	// Retriable errors are retried until ctx ends; an unknown partition
	// for 30 seconds.
	p := retry.Doubling(20*time.Millisecond, time.Second, func(err error) bool {
		if unknown(err) {
			return !time.Now().After(unknownUntil)
		}
		return kerr.IsRetriable(err)
	})
	var (
		at   int64
		last error
	)
	err := p.Do(ctx, func() error {
		offs, err := list(ctx, topic)
		if err == nil {
			o, ok := offs.Lookup(topic, partition)
			switch {
			case ok && o.Err == nil:
				at = o.Offset
				return nil
			case ok:
				err = o.Err
			default:
				err = kerr.UnknownTopicOrPartition
				if o, ok := offs.Lookup(topic, -1); ok && o.Err != nil {
					err = o.Err
				}
			}
		}
		last = err
		return err
	}, nil)
	switch {
	case err == nil:
		return at, nil
	case unknown(last) && time.Now().After(unknownUntil):
		return 0, fmt.Errorf("partition %d of %s still unknown after 30s: %w", partition, topic, last)
	case (unknown(last) || kerr.IsRetriable(last)) && ctx.Err() != nil:
		return 0, errors.Join(last, ctx.Err())
	}
	return 0, last
}

func restoreRange(ctx context.Context, topic string, partition int32, from, end int64, st *store.Store, opts ...kgo.Opt) (int, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("changelog: restore client for %s/%d: %w", topic, partition, err)
	}
	defer cl.Close()
	cp, _ := st.Checkpoint()
	var (
		applied int
		writes  []store.Write
	)
	prog := newProgress(ctx, topic, partition, from, end)
	err = lso.ReadRange(ctx, cl, topic, partition, from, end, func(rs []*kgo.Record) error {
		writes = slices.Grow(writes[:0], len(rs))
		for _, r := range rs {
			writes = append(writes, Write(r))
		}
		// Every record above the last one of this fetch was written
		// after it: its timestamp bounds their write time from below.
		last := rs[len(rs)-1]
		cp.Next, cp.Time = last.Offset+1, last.Timestamp
		if err := st.ApplyRestored(writes, cp); err != nil {
			return err
		}
		applied += len(writes)
		prog.report(rs)
		return nil
	}, func(offset int64, err error) error {
		return fmt.Errorf("changelog: restoring %s/%d at offset %d: %w", topic, partition, offset, acl(err, "Read", topic))
	})
	return applied, err
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

// StampHeader is the header of a changelog record that carries its put's
// stamp (store.Write.Stamp): changelog.StampHeader.
const StampHeader = "flechtwerk.stamp"

// Write returns the store write of changelog record r: a put of its
// value with its stamp (StampHeader), or a delete for a tombstone.
func Write(r *kgo.Record) store.Write {
	w := store.Write{Key: r.Key}
	if r.Value == nil {
		w.Delete = true
		return w
	}
	w.Value = r.Value
	for _, h := range r.Headers {
		if h.Key == StampHeader {
			w.Stamp = h.Value
		}
	}
	return w
}
