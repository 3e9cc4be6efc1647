package task

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// Lane is the one transactional producer of an instance whose tasks share
// its transactions (the shared-producer mode, runner.SharedProducer).
// Each task joins the open transaction as it first writes (Add). The
// lane's owner seals it (Seal), has every task in it prepare its part
// (Prepare), ends it with the offsets of all of them (End) and has each
// apply its part (Committed); or aborts it (Abort), after which every
// task in it must be closed and restarted from its committed offsets.
type Lane struct {
	l   *txn.Lane
	cfg Config
}

// laneRetryCap is the longest wait between two tries of a lane's
// AddOffsetsToTxn (and TxnOffsetCommit): every task waits for the lane's
// next transaction to open.
const laneRetryCap = 5 * time.Millisecond

// NewLane returns the lane of transactional ID id that the tasks of proc
// share (cfg is any of theirs, its partition unused). Its producer, opened
// at the first join, fences every previous owner of id and routes records
// as each task's own producer would; its transactions commit offsets of
// cfg's application, with cfg's topic IDs and metadata.
func NewLane(id string, cfg Config, proc process.Processor) *Lane {
	rt, _, _, _ := routing(cfg, proc)
	opts := append([]kgo.Opt{kgo.ProducerLinger(0)}, cfg.KafkaOpts...)
	open := func(ctx context.Context) (*txn.Producer, error) {
		p, err := txn.OpenRouted(ctx, id, cfg.TransactionTimeout, rt, opts...)
		if err != nil {
			return nil, err
		}
		p.SetRetryCap(laneRetryCap)
		return p, nil
	}
	return &Lane{l: txn.NewLane(open, cfg.ApplicationID), cfg: cfg}
}

// Join adds t to the open transaction, which it begins when none is open
// (Add does it when t first writes). A sealed lane is waited for; ctx
// bounds the wait and the opening.
func (l *Lane) Join(ctx context.Context, t *Task) error {
	_, err := l.l.Join(ctx, t)
	return err
}

// Seal closes the open transaction to new joins until End or Abort and
// returns the tasks in it (none: no transaction is open, or it is sealed
// already).
func (l *Lane) Seal() []*Task {
	joined := l.l.Seal()
	out := make([]*Task, len(joined))
	for i, who := range joined {
		out[i] = who.(*Task)
	}
	return out
}

// End commits the sealed transaction with next, the next offsets per
// input topic and partition of every task in it, carrying member's
// identity (KIP-447: refused, and the transaction aborted, for a member
// that left the group or a stale generation), and reports how long it
// took. On error the transaction was aborted or its outcome is unknown.
func (l *Lane) End(ctx context.Context, next map[string]map[int32]int64, member func() (string, int32)) (time.Duration, error) {
	tm, err := l.l.End(ctx, &txn.Offsets{
		Group:    l.cfg.ApplicationID,
		Next:     next,
		TopicIDs: l.cfg.TopicIDs,
		Metadata: l.cfg.OffsetsMetadata,
		Member:   member,
	})
	return tm.Total, err
}

// Abort aborts the sealed (or open) transaction, if any; the next join
// opens a new producer, which fences the lane's transactional ID.
func (l *Lane) Abort(ctx context.Context) error { return l.l.Abort(ctx) }

// Reopen fences the lane's transactional ID with a new producer after a
// failed transaction, so that nothing of it stays open.
func (l *Lane) Reopen(ctx context.Context) error { return l.l.Reopen(ctx) }

// Close closes the lane's producer; an open transaction is aborted by the
// broker at its transaction timeout.
func (l *Lane) Close() { l.l.Close() }
