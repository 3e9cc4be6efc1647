package txn

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/authz"
)

// Transient reports whether err, met by a task's transaction (beginning
// it, producing into it, adding the offsets, ending it), is a transient
// broker condition after which the task can be closed dirty and
// re-initialized (fence, restore, re-seek) instead of ending Run, as Kafka
// Streams does:
//
//   - a broker error code franz-go marks retriable (NOT_COORDINATOR,
//     COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
//     REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, ...)
//     that outlived the client's own retries;
//   - CONCURRENT_TRANSACTIONS, TRANSACTION_ABORTABLE, UNKNOWN_PRODUCER_ID,
//     OPERATION_NOT_ATTEMPTED: the transaction can be aborted and the
//     producer re-initialized;
//   - OUT_OF_ORDER_SEQUENCE_NUMBER on a partition's first outstanding
//     batch (franz-go retries it on later ones; kfake answers it to a batch
//     in flight behind a refused first batch of a new epoch): franz-go
//     fails a transactional producer's ID on it, so the transaction can
//     only abort; the batch is in no committed transaction, and the
//     re-initialization's new epoch starts the sequences again. Kafka
//     Streams closes the task dirty on it too;
//   - ErrProducerReinitialized: franz-go re-initialized the producer ID in
//     the middle of the transaction, which aborted it;
//   - REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION: the
//     group is moving tasks; the rebalance decides who owns the task;
//   - a network error (a refused dial, a reset or closed connection, an
//     i/o timeout), a record that timed out or ran out of retries, and a
//     deadline of the commit that passed (the outcome of the end is not
//     known: the re-initialization's fence settles it).
//
// A task is re-initialized only while its member still owns it (the
// runner checks the assignment first), so a producer fenced by a new owner
// does not fence it back. INVALID_PRODUCER_ID_MAPPING, anywhere in err's
// chain, is not transient: the transactional ID maps to another producer
// ID, which is what a fenced producer sees once the new owner's epochs ran
// out and it got a new producer ID (every transaction bumps the epoch
// under transaction version 2).
//
// A fence (another owner), an authorization error, a topic that does not
// exist (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID: while a task runs,
// its topics were deleted, which no re-initialization mends), a canceled
// context and every other error are not transient.
func Transient(err error) bool {
	if err == nil || fencing.IsFenced(err) || errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) ||
		errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
		return false
	}
	if _, ok := authz.Refused(err); ok {
		return false
	}
	for _, e := range []*kerr.Error{
		kerr.ConcurrentTransactions, kerr.TransactionAbortable, kerr.UnknownProducerID, kerr.OperationNotAttempted,
		kerr.OutOfOrderSequenceNumber,
		kerr.RebalanceInProgress, kerr.UnknownMemberID, kerr.IllegalGeneration,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	if errors.Is(err, ErrProducerReinitialized) {
		return true
	}
	if kerr.IsRetriable(err) || network(err) || kgoTransient(err) {
		return true
	}
	return errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries) ||
		errors.Is(err, context.DeadlineExceeded)
}

// network reports a connection that could not be made or broke: a dial,
// read or write error of the network (*net.OpError, which holds every
// socket error, timeouts included), a failed name lookup, or a connection
// that ended early. Other system errors (a file error of the store, say)
// are not.
func network(err error) bool {
	var oe *net.OpError
	var de *net.DNSError
	return errors.As(err, &oe) || errors.As(err, &de) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// kgoMessages are franz-go's own unexported errors that it retries itself
// (isRetryableBrokerErr) and that can outlive its retries: matched by their
// text, since they cannot be matched with errors.Is.
var kgoMessages = map[string]bool{
	"the broker connection has died and the request will be retried on a new connection": true,
	"unknown broker":          true,
	"correlation ID mismatch": true,
}

// kgoTransient reports whether an error in err's chain is one of
// kgoMessages.
func kgoTransient(err error) bool {
	if err == nil {
		return false
	}
	if kgoMessages[err.Error()] {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return kgoTransient(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if kgoTransient(e) {
				return true
			}
		}
	}
	return false
}

// Dropped reports a connection that was accepted and then closed or reset
// by the other side (io.EOF, ECONNRESET, EPIPE; franz-go's
// *kgo.ErrFirstReadEOF holds io.EOF): a broker restarting or a proxy
// cutting connections, unlike a refused dial or a silent broker. A client
// that speaks plaintext to a TLS listener sees it too, so callers retry it
// only a few times.
func Dropped(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || kgoTransient(err)
}
