package txn

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/flechtwerk/flechtwerk/fencing"
)

// classifyCommit is fencing.Classify for the error of ending a transaction
// with a commit. There INVALID_TXN_STATE also means fenced: under
// transaction version 2 a producer whose epoch is one behind, committing a
// transaction the coordinator already aborted (a new owner's
// InitProducerId, or the transaction timeout), gets INVALID_TXN_STATE
// instead of PRODUCER_FENCED. Either way the broker aborted the transaction
// and the producer is done.
func classifyCommit(txnID string, err error) error {
	if err != nil && errors.Is(err, kerr.InvalidTxnState) && !errors.Is(err, fencing.ErrFenced) {
		return &commitFencedError{txnID: txnID, err: err}
	}
	return fencing.Classify(txnID, err)
}

// commitFencedError keeps the broker's error in the chain under
// fencing.ErrFenced, worded as fencing words a fence.
type commitFencedError struct {
	txnID string
	err   error
}

func (e *commitFencedError) Error() string {
	return fmt.Sprintf("fencing: transactional id %s fenced by a newer owner: %v", e.txnID, e.err)
}

func (e *commitFencedError) Unwrap() []error { return []error{fencing.ErrFenced, e.err} }
