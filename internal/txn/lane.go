package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Lane is a transactional producer whose transactions are shared by
// several tasks (the shared-producer mode). A task joins the open
// transaction when it has something to send (Join, which begins it, with
// the group's offsets partition added, when none is open); the lane's
// owner seals the transaction (Seal: no task joins it any more, and every
// task that joined is known), collects the offsets of every one of them,
// and ends it (End) or aborts it (Abort), which unseals the lane.
//
// After a failed transaction the lane's producer begins no other (see
// Producer): the next Join opens a new one, which fences the lane's
// transactional ID and so aborts whatever of the failed transaction is
// still open. Every task that joined the failed one replays from its
// committed offsets.
type Lane struct {
	open  func(context.Context) (*Producer, error)
	group string

	mu sync.Mutex
	// unsealed is closed while the lane is not sealed; Seal replaces it.
	unsealed chan struct{}
	p        *Producer // nil: not opened yet, or closed after a failure
	cur      *Txn
	joined   []any // who joined cur, in order
}

// NewLane returns a lane whose producer open creates (it fences every
// previous owner of the lane's transactional ID), and whose transactions
// commit offsets of group.
func NewLane(open func(context.Context) (*Producer, error), group string) *Lane {
	l := &Lane{open: open, group: group, unsealed: make(chan struct{})}
	close(l.unsealed)
	return l
}

// Join adds who to the open transaction and returns it; when none is
// open it begins one (opening the producer first when there is none). A
// sealed lane is waited for. ctx bounds the wait and the opening. On
// error nothing was sent and who is not in any transaction.
func (l *Lane) Join(ctx context.Context, who any) (*Txn, error) {
	for {
		l.mu.Lock()
		wait := l.unsealed
		select {
		case <-wait:
		default:
			l.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("joining the shared transaction: %w", ctx.Err())
			}
		}
		break
	}
	defer l.mu.Unlock()
	if l.cur != nil {
		l.joined = append(l.joined, who)
		return l.cur, nil
	}
	if l.p == nil {
		p, err := l.open(ctx)
		if err != nil {
			return nil, err
		}
		l.p = p
	}
	x, err := l.p.Begin(ctx)
	if err != nil {
		l.drop()
		return nil, err
	}
	if err := x.AddOffsets(ctx, l.group); err != nil {
		err = errors.Join(err, x.Abort(context.WithoutCancel(ctx)))
		l.drop()
		return nil, err
	}
	l.cur, l.joined = x, []any{who}
	return x, nil
}

// drop closes the producer after a failed transaction; the caller holds
// mu.
func (l *Lane) drop() {
	if l.p != nil {
		l.p.Close()
		l.p = nil
	}
}

// Seal closes the open transaction to new joins, until End or Abort, and
// returns who joined it (none: no transaction is open, and the lane is
// not sealed). A Join meanwhile waits.
func (l *Lane) Seal() []any {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return nil
	}
	select {
	case <-l.unsealed:
		l.unsealed = make(chan struct{})
	default:
		// Sealed already: the owner seals once per transaction.
	}
	return l.joined
}

// End ends the sealed transaction with offsets (see Txn.End: they must
// be of the lane's group and hold every partition of every task that
// joined), then unseals the lane. After an error the transaction was
// aborted, or its outcome is unknown.
func (l *Lane) End(ctx context.Context, offsets *Offsets) (Timing, error) {
	x := l.take()
	if x == nil {
		return Timing{}, errors.New("txn: no shared transaction to end")
	}
	tm, err := x.End(ctx, offsets)
	l.finish(err != nil)
	return tm, err
}

// Abort aborts the sealed (or open) transaction, if any, and unseals the
// lane; the next Join opens a new producer.
func (l *Lane) Abort(ctx context.Context) error {
	x := l.take()
	if x == nil {
		l.finish(false)
		return nil
	}
	err := x.Abort(ctx)
	l.finish(true)
	return err
}

// take detaches the open transaction.
func (l *Lane) take() *Txn {
	l.mu.Lock()
	defer l.mu.Unlock()
	x := l.cur
	l.cur, l.joined = nil, nil
	return x
}

// finish unseals the lane, dropping its producer after a failure.
func (l *Lane) finish(failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if failed {
		l.drop()
	}
	select {
	case <-l.unsealed:
	default:
		close(l.unsealed)
	}
}

// Close closes the lane's producer; an open transaction is aborted by
// the broker (the next owner of the transactional ID, or its timeout).
func (l *Lane) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drop()
}
