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
	// opening is closed when the transaction a Join is opening is open
	// (nil: none is being opened).
	opening chan struct{}
	cur     *Txn
	closed  bool
	joined  []any // who joined cur, in order
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
// open it begins one (opening the producer first when there is none),
// without holding the lane: a Seal meanwhile finds no transaction, and
// other joiners wait for the opening. A sealed lane is waited for. ctx
// bounds the waits and the opening. On error nothing was sent and who is
// not in any transaction.
func (l *Lane) Join(ctx context.Context, who any) (*Txn, error) {
	for {
		l.mu.Lock()
		var wait chan struct{}
		select {
		case <-l.unsealed:
			if l.opening != nil {
				wait = l.opening
			}
		default:
			wait = l.unsealed
		}
		if wait != nil {
			l.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("joining the shared transaction: %w", ctx.Err())
			}
		}
		if l.closed {
			l.mu.Unlock()
			return nil, errLaneClosed
		}
		if l.cur != nil {
			l.joined = append(l.joined, who)
			l.mu.Unlock()
			return l.cur, nil
		}
		opening := make(chan struct{})
		l.opening = opening
		p := l.p
		l.mu.Unlock()
		x, p, err := l.begin(ctx, p)
		l.mu.Lock()
		l.opening = nil
		close(opening)
		if err == nil && l.closed {
			err = errLaneClosed
		}
		if err != nil {
			if p != nil {
				p.Close()
			}
			l.p = nil
			l.mu.Unlock()
			return nil, err
		}
		l.p, l.cur, l.joined = p, x, []any{who}
		l.mu.Unlock()
		return x, nil
	}
}

// begin begins a transaction of p (opening a producer when p is nil)
// with the group's offsets partition added. On error the transaction is
// aborted and p, if any, must be closed.
func (l *Lane) begin(ctx context.Context, p *Producer) (*Txn, *Producer, error) {
	if p == nil {
		var err error
		if p, err = l.open(ctx); err != nil {
			return nil, nil, err
		}
	}
	x, err := p.Begin(ctx)
	if err != nil {
		return nil, p, err
	}
	if err := x.AddOffsets(ctx, l.group); err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), AbortTimeout)
		defer cancel()
		return nil, p, errors.Join(err, x.Abort(actx))
	}
	return x, p, nil
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
// returns who joined it (none: no transaction is open, or it is sealed
// already; the lane is then left as it is). A Join meanwhile waits.
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
		// Sealed already: its owner has it, and ends it.
		return nil
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

// Reopen opens a new producer now when the last transaction failed
// (none is open): it fences the lane's transactional ID, which aborts
// whatever of the failed transaction is still open, instead of leaving
// it to the next Join or to the broker's transaction timeout, which
// every restore of the tasks in it would wait for.
func (l *Lane) Reopen(ctx context.Context) error {
	l.mu.Lock()
	if l.closed || l.p != nil || l.opening != nil || l.cur != nil {
		l.mu.Unlock()
		return nil
	}
	opening := make(chan struct{})
	l.opening = opening
	l.mu.Unlock()
	p, err := l.open(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opening = nil
	close(opening)
	if err == nil && l.closed {
		p.Close()
		return errLaneClosed
	}
	if err != nil {
		return err
	}
	l.p = p
	return nil
}

// errLaneClosed is the error of a Join after Close.
var errLaneClosed = errors.New("txn: the shared transaction's lane is closed")

// Close closes the lane's producer; an open transaction is aborted by
// the broker (the next owner of the transactional ID, or its timeout).
// A Join after it, or one opening meanwhile, fails.
func (l *Lane) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.drop()
}
