package transform

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/task"
)

// manyPartitions is the partition count from which the start-up log of
// the default mode points to the shared-producer mode.
const manyPartitions = 32

// sharedTransactionalID returns the transactional ID of an instance of
// app in the shared-producer mode: unique to the Run, since no two
// instances may share it (the group's generation fences, not the ID).
func sharedTransactionalID(app string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-shared-%x", app, b)
}

// shared runs the shared-producer mode's transactions: the instance's
// tasks write into the one transaction of its lane, joined by each task
// as it first writes (task.Add), and a commit round ends it for all of
// them at once. The first worker whose commit is due (the interval's
// tick, a bound, a revocation, Run's stop) seals the lane; every task in
// the transaction then prepares its part (task.Prepare: its changelog
// records and its offsets) on its own worker; the round ends the
// transaction with the offsets of all of them, each carrying the group
// member's generation; then each task applies its part to its stores.
//
// One failure aborts the whole transaction: of a task's part, of the
// end, or a task in it that stops without its part (its partitions
// lost, Run failing). Every task in it then replays from its committed
// offsets, re-initialized like a task after a transient error.
type shared struct {
	rn   *run
	lane *task.Lane

	mu sync.Mutex
	r  *round // of the sealed transaction; nil: none
}

// round is the commit of one sealed transaction.
type round struct {
	// want are the tasks in the transaction that have not reported;
	// parts what the others prepared.
	want  map[*task.Task]bool
	parts map[*task.Task]*task.Prepared
	// failed is the first failure reported (nil: none).
	failed error
	ready  chan struct{} // closed once every task reported
	// done is closed once the transaction ended; then err says how (nil:
	// committed) and tm how long it took.
	done chan struct{}
	err  error
}

// errPartAborted is the error a task gets when the shared transaction it
// was in aborted for another task's failure: it replays from its
// committed offsets.
var errPartAborted = errors.New("the shared transaction was aborted")

// seal returns the round of the lane's open transaction, sealing it when
// no round is under way (nil: no transaction is open).
func (sh *shared) seal() *round {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.r != nil {
		return sh.r
	}
	joined := sh.lane.Seal()
	if len(joined) == 0 {
		return nil
	}
	r := &round{
		want:  make(map[*task.Task]bool, len(joined)),
		parts: make(map[*task.Task]*task.Prepared, len(joined)),
		ready: make(chan struct{}),
		done:  make(chan struct{}),
	}
	for _, t := range joined {
		r.want[t] = true
	}
	sh.r = r
	go sh.end(r)
	// Every task in it reports, idle ones woken.
	sh.rn.mu.Lock()
	for _, w := range sh.rn.workers {
		if r.want[w.t] {
			w.wake()
		}
	}
	sh.rn.mu.Unlock()
	return r
}

// roundOf returns the sealed round that waits for t's part (nil: none).
func (sh *shared) roundOf(t *task.Task) *round {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.r != nil && sh.r.want[t] {
		return sh.r
	}
	return nil
}

// report records t's part of r (failed: why it has none).
func (sh *shared) report(r *round, t *task.Task, p *task.Prepared, failed error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !r.want[t] {
		return
	}
	delete(r.want, t)
	if failed != nil {
		if r.failed == nil {
			r.failed = failed
		}
	} else {
		r.parts[t] = p
	}
	if len(r.want) == 0 {
		close(r.ready)
	}
}

// end ends r's transaction once every task reported: aborted after a
// failure, committed with every part's offsets otherwise.
func (sh *shared) end(r *round) {
	<-r.ready
	// Every task in r reported and holds r: none looks it up any more.
	// It is cleared before the lane unseals (End, Abort), so that a task
	// in the next transaction never finds it (seal, roundOf); the lane,
	// sealed until then, seals nothing meanwhile (Lane.Seal).
	sh.mu.Lock()
	sh.r = nil
	sh.mu.Unlock()
	c := sh.rn.c
	ctx, cancel := context.WithTimeout(context.Background(), c.BatchTimeout)
	defer cancel()
	if r.failed != nil {
		actx, acancel := context.WithTimeout(context.Background(), txn.AbortTimeout)
		r.err = errors.Join(r.failed, sh.lane.Abort(actx))
		acancel()
	} else {
		next := map[string]map[int32]int64{}
		for t, p := range r.parts {
			for topic, off := range p.Offsets {
				if next[topic] == nil {
					next[topic] = map[int32]int64{}
				}
				next[topic][t.Partition()] = off
			}
		}
		// The offsets carry the member's identity while it has the ID
		// every task in the transaction was assigned under (see
		// run.owners), and none otherwise: the end is refused then.
		owners := map[string]bool{}
		sh.rn.mu.Lock()
		for t := range r.parts {
			owners[sh.rn.owners[t.Partition()]] = true
		}
		sh.rn.mu.Unlock()
		member := func() (string, int32) {
			id, gen := sh.rn.consumer.GroupMetadata()
			if len(owners) != 1 || !owners[id] {
				return "", -1
			}
			return id, gen
		}
		var took time.Duration
		took, r.err = sh.lane.End(ctx, next, member)
		c.Logger.Debug("shared transaction committed", "tasks", len(r.parts), "took", took, "err", r.err)
	}
	if r.err != nil {
		// Fence what is left of the failed transaction now: the restores
		// of the tasks in it wait for it to end.
		rctx, rcancel := context.WithTimeout(context.Background(), c.TransactionTimeout)
		if err := sh.lane.Reopen(rctx); err != nil {
			c.Logger.Warn("shared transaction failed and its producer could not be reopened; its restores wait for the broker's transaction timeout", "err", err)
		}
		rcancel()
	}
	close(r.done)
}

// commitShared commits the worker's task's part of the lane's open
// transaction: it seals the transaction (unless a round is under way)
// and takes part in its round.
func (w *worker) commitShared() error {
	sh := w.rn.shared
	for {
		r := sh.seal()
		if r == nil {
			// Cannot happen: the task is in the open transaction
			// (Pending().Txn).
			return &txnError{fmt.Errorf("runner: task %d: in no shared transaction to commit", w.t.Partition())}
		}
		if sh.roundOf(w.t) == r {
			return w.takePart(r)
		}
		// The round under way ends an earlier transaction than the
		// task's: the next round is the task's.
		<-r.done
	}
}

// takePart prepares the task's part of r, waits for r's end, and applies
// the part once r committed.
func (w *worker) takePart(r *round) error {
	sh := w.rn.shared
	n := w.t.Partition()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), w.rn.c.BatchTimeout)
	p, err := w.t.Prepare(ctx)
	cancel()
	if err == nil && p == nil {
		err = fmt.Errorf("task %d: in the shared transaction with nothing to prepare", n)
	}
	sh.report(r, w.t, p, err)
	<-r.done
	if r.err != nil {
		w.t.Aborted(p, r.err)
		w.rn.c.Metrics.CommitFailed(n, time.Since(began), r.err)
		switch {
		case err != nil: // this task's part failed
			return &txnError{fmt.Errorf("runner: %w", err)}
		case r.failed != nil: // another task's part: this one replays
			return &txnError{fmt.Errorf("runner: task %d: %w: %w", n, errPartAborted, r.failed)}
		default: // the end failed
			return &txnError{fmt.Errorf("runner: task %d: shared transaction: %w", n, r.err)}
		}
	}
	st, err := w.t.Committed(p)
	w.committed(&st, time.Since(began))
	if err != nil {
		return &txnError{fmt.Errorf("runner: %w", err)}
	}
	w.first = nil
	w.rn.committed(n)
	return nil
}

// leaveShared makes sure that a transaction the worker's task is in does
// not commit without its part: the worker stops without committing (its
// partitions lost, Run failing, its task failed). The transaction is
// sealed and aborted; every other task in it replays.
func (w *worker) leaveShared(cause error) {
	if !w.t.Pending().Txn {
		return
	}
	sh := w.rn.shared
	r := sh.roundOf(w.t)
	if r == nil {
		r = sh.seal()
	}
	if r == nil {
		return
	}
	if cause == nil {
		cause = fmt.Errorf("task %d stopped without committing", w.t.Partition())
	}
	sh.report(r, w.t, nil, cause)
}
