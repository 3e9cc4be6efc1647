package fencing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/authz"
)

// ErrFenced means another owner took over this task's transactional ID: the
// open transaction was aborted by the broker, nothing of it is visible, and
// its input will be processed by the new owner. The process should stop
// working on the task (Run returns it); restarting is safe.
var ErrFenced = errors.New("fencing: producer fenced by a newer owner of the transactional ID")

// TransactionalID returns the static transactional ID of task n of an
// application: "{applicationID}-{n}".
func TransactionalID(applicationID string, n int32) string {
	return applicationID + "-" + strconv.Itoa(int(n))
}

// IsFenced reports whether err means the producer was fenced.
func IsFenced(err error) bool {
	return errors.Is(err, ErrFenced) ||
		errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch)
}

// fencedError keeps the broker's error in the chain under ErrFenced.
type fencedError struct {
	txnID string
	err   error
}

func (e *fencedError) Error() string {
	return fmt.Sprintf("fencing: transactional id %s fenced by a newer owner: %v", e.txnID, e.err)
}

func (e *fencedError) Unwrap() []error { return []error{ErrFenced, e.err} }

// Classify wraps err so that errors.Is(err, ErrFenced) holds when err says
// the producer with transactional ID txnID was fenced (PRODUCER_FENCED or
// INVALID_PRODUCER_EPOCH), for the errors of a producer Init returned.
// Other errors are returned unchanged; nil stays nil.
func Classify(txnID string, err error) error {
	if err == nil || errors.Is(err, ErrFenced) {
		return err
	}
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return &fencedError{txnID: txnID, err: err}
	}
	return err
}

// Init creates a transactional producer with the static ID txnID and
// initializes its producer ID: the fence. When Init returns, any previous
// owner of txnID is fenced and its open transaction aborted. opts are added
// to the client's options (seed brokers, TLS, SASL, partitioner, ...); they
// cannot override the transactional settings.
func Init(ctx context.Context, txnID string, txnTimeout time.Duration, opts ...kgo.Opt) (*kgo.Client, error) {
	// The caller's options come first: the ones below decide delivery.
	all := append(slices.Clone(opts),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(txnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		// A transaction's first writes often meet the previous one's
		// markers still being written (CONCURRENT_TRANSACTIONS); the
		// default 250ms first backoff would dominate every commit.
		kgo.RetryBackoffFn(backoff),
		// A produce retried for a stale leader or a transient
		// NOT_ENOUGH_REPLICAS waits for a metadata refresh, at most one
		// per MetadataMinAge. Kafka's partition verification answers
		// NOT_ENOUGH_REPLICAS while the transaction is in a state
		// transition (CONCURRENT_TRANSACTIONS underneath, which clears
		// in milliseconds), about once per commit under load while the
		// offsets went beside a commit's last writes (internal/txn): the
		// default 5s would stall the transaction that long, and 250ms
		// still set the p99 of a commit at short intervals (eosbench
		// -partitions 1, row CommitInterval 10ms: End p99 150-230ms
		// at 250ms, 35-105ms at 20ms).
		kgo.MetadataMinAge(20*time.Millisecond),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("fencing: producer for %s: %w", txnID, err)
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		// A refused InitProducerId needs Write on the transactional id
		// (IdempotentWrite on the cluster for brokers that ask it).
		err = authz.Wrap(Classify(txnID, err), "IdempotentWrite", map[authz.Resource]string{authz.TransactionalID: txnID})
		return nil, fmt.Errorf("fencing: initializing producer id of %s: %w", txnID, err)
	}
	return cl, nil
}

// backoff is exponential from 5ms, capped at 1s, with no jitter: the
// retried conditions clear in milliseconds.
func backoff(fails int) time.Duration {
	if fails > 8 {
		return time.Second
	}
	return min(5*time.Millisecond<<max(fails-1, 0), time.Second)
}
