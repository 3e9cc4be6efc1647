package transform

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/group"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task"
)

// restore is the restore of one pending task, on its own goroutine, or
// the start (the fence) of a task that is not pending yet.
type restore struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine exited
	// fence: a start, which a revocation waits for instead of cutting it
	// short (see release).
	fence bool
}

// startRestores starts the restore of every pending task that has none
// yet (the main loop calls it; ctx is Run's). Restores run one at a time,
// in task order, beside the processing of the running tasks: a task that
// did not move never waits for another one's restore.
func (rn *run) startRestores(ctx context.Context) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	ns := make([]int32, 0, len(rn.pending))
	for n := range rn.pending {
		if rn.restores[n] == nil {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	for _, n := range ns {
		t := rn.pending[n]
		rctx, cancel := context.WithCancel(ctx)
		r := &restore{cancel: cancel, done: make(chan struct{})}
		rn.restores[n] = r
		rn.restoreWG.Add(1)
		go func() {
			defer rn.restoreWG.Done()
			defer close(r.done)
			defer cancel()
			rn.runRestore(rctx, n, t, r)
		}()
	}
}

// runRestore restores t and, unless it was revoked meanwhile, makes it a
// running task: its worker starts and its partitions resume.
func (rn *run) runRestore(ctx context.Context, n int32, t *task.Task, r *restore) {
	rn.mu.Lock()
	restarting := rn.restarting[n] && rn.pending[n] == t
	rn.mu.Unlock()
	var (
		seek map[string]kgo.EpochOffset
		err  error
	)
	if restarting {
		// Newly assigned (onAssigned), or re-initialized after a
		// transient error (recover.go): it reads its input from the
		// group's committed offsets, read now, after its fence, and
		// before the restore. A require-stable read waits for every
		// transaction that sent offsets of the task's partitions: in the
		// shared-producer mode, which fences no earlier owner, a
		// transaction of the previous owner that sent its offsets before
		// the rebalance may still commit, and the restore, which reads
		// the changelog up to its last stable offset, must then include
		// its writes.
		seek, err = rn.committedOffsets(ctx, n)
		if err == nil {
			next := make(map[string]int64, len(seek))
			for topic, o := range seek {
				next[topic] = o.Offset
			}
			t.SetPosition(next)
		}
	}
	if err == nil {
		select {
		case rn.restoreSlot <- struct{}{}:
			err = t.Restore(rn.ops.RestoreContext(ctx, n), rn.adm)
			<-rn.restoreSlot
		case <-ctx.Done():
			err = ctx.Err()
		}
	}

	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.restores[n] == r {
		delete(rn.restores, n)
	}
	if rn.pending[n] != t {
		return // revoked: the revocation closes t once this returned
	}
	if err != nil {
		if ctx.Err() != nil {
			return // Run is ending
		}
		if rn.restoreFailed(n, t, err) {
			return // closed, and queued for a restart
		}
		rn.setFatal(fmt.Errorf("runner: %w", err))
		return
	}
	delete(rn.pending, n)
	rn.tasks[n] = t
	rn.workers[n] = rn.startWorker(t, rn.owners[n])
	rn.publishTasks()
	if restarting {
		// Its partitions resume once re-positioned, by the main loop
		// while the poll blocks rebalances (applySeeks).
		rn.seeks[n] = seek
		rn.poke()
	} else {
		rn.consumer.ResumeFetchPartitions(rn.topicPartitions(n))
	}
	rn.c.Logger.Info("task running", "partition", n)
}

// publishTasks records the running tasks and those still starting or
// restoring: their stores become the queryable ones (a store leaves that
// set before it closes), the metrics and Ops learn them. The caller holds
// the batch lock.
func (rn *run) publishTasks() {
	starting := 0
	for n := range rn.restores {
		if rn.pending[n] == nil {
			starting++
		}
	}
	rn.qmu.Lock()
	var gone []int32
	for n := range rn.stores {
		if rn.tasks[n] == nil {
			delete(rn.stores, n)
			gone = append(gone, n)
		}
	}
	for n, t := range rn.tasks {
		rn.stores[n] = t.Store()
	}
	clear(rn.named)
	for n, t := range rn.tasks {
		names := rn.storeNames()
		if len(names) == 0 {
			continue
		}
		m := make(map[string]*store.Store, len(names))
		for _, name := range names {
			if name == task.TimersStore {
				m[name] = t.TimerStore()
			} else {
				m[name] = t.NamedStore(name)
			}
		}
		rn.named[n] = m
	}
	rn.qmu.Unlock()
	for _, n := range gone {
		rn.c.Metrics.EntriesChanged(n) // takes the recorder's lock: not under qmu
	}
	rn.c.Metrics.Tasks(len(rn.tasks), len(rn.pending)+starting)
	rn.ops.Tasks(rn.tasks, rn.pending, starting)
}

func (rn *run) topicPartitions(ns ...int32) map[string][]int32 {
	m := make(map[string][]int32, len(rn.c.InputTopics))
	for _, t := range rn.c.InputTopics {
		m[t] = slices.Clone(ns)
	}
	return m
}

// onAssigned pauses the newly assigned partitions and starts their tasks,
// each on its own goroutine (startTask): the callback holds the poll (kgo's
// BlockRebalanceOnPoll) for bookkeeping only, so the tasks this member
// holds already go on processing while the new ones fence their previous
// owners. The group is cooperative (group.Balancer): assigned holds only
// what this member did not hold before. A new task's partitions stay
// paused until it is fenced, restored and positioned at the group's
// committed offsets read after its fence (require-stable), like a
// restarted task's (runRestore, applySeeks).
func (rn *run) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	c := rn.c
	rn.ops.Rebalance(true)
	cl.PauseFetchPartitions(assigned)

	held := group.Held(assigned)
	var ns []int32
	rn.mu.Lock()
	for n, k := range held {
		if n >= rn.partitions {
			rn.mu.Unlock()
			rn.setFatal(flechtwerk.Errorf(flechtwerk.CodePartitionMismatch, "topic "+strings.Join(c.InputTopics, ","),
				"assigned partition %d, but the input topics had %d partitions at startup and the changelog has as many; adding partitions to inputs needs a state migration", n, rn.partitions))
			return
		}
		if k != len(c.InputTopics) {
			rn.mu.Unlock()
			rn.setFatal(fmt.Errorf("runner: partition %d assigned for %d of %d input topics; the group must assign partition N of every co-partitioned input together (is another application using group %q?)", n, k, len(c.InputTopics), c.ApplicationID))
			return
		}
		if rn.tasks[n] != nil || rn.pending[n] != nil || rn.restores[n] != nil {
			// Starting the task again would fence the running one.
			rn.mu.Unlock()
			rn.setFatal(fmt.Errorf("runner: partition %d assigned again to the member that holds it (group %q)", n, c.ApplicationID))
			return
		}
		ns = append(ns, n)
	}
	rn.mu.Unlock()
	slices.Sort(ns)
	// A standby of a task that starts here gives its store up first: the
	// task opens it warm and replays only what the standby had not
	// applied.
	for _, n := range ns {
		if err := rn.releaseStandby(n); err != nil {
			rn.setFatal(err)
			return
		}
	}

	// Each new task fences its previous owner on its own goroutine: the
	// poll, and with it every task that did not move, goes on meanwhile.
	// Its partitions stay paused, and records fetched for them are
	// dropped, until it is fenced, restored and re-positioned at the
	// group's committed offsets read after the fence (as a restarted
	// task: runRestore, applySeeks); the offsets the client fetches
	// after this callback, maybe before the fence, are not used.
	member, _ := cl.GroupMetadata()
	rn.mu.Lock()
	for _, n := range ns {
		rn.restarting[n] = true
		rn.startTask(ctx, n, member)
	}
	// Every assignment ends the rebalance state: Running again when
	// nothing new was assigned, Restoring while new tasks start.
	rn.publishTasks()
	rn.mu.Unlock()
	if len(ns) > 0 {
		c.Logger.Info("partitions assigned", "partitions", ns)
	}
	rn.groupJoined()
	// Every assignment carries this member's standby tasks (kgo calls
	// onAssigned after every sync, with nothing new assigned too).
	rn.syncStandbys()
	rn.poke()
}

// startTask starts (fences) task n, newly assigned to the group member
// owner, on its own goroutine; the caller holds the batch lock. The start is tracked like a restore,
// so a revocation of the task waits for it and closes the task (release,
// and the goroutine, which finds the task revoked).
// A started task becomes pending: the main loop restores it
// (startRestores), and its restore queues the re-seek of its partitions.
func (rn *run) startTask(ctx context.Context, n int32, owner string) {
	rn.owners[n] = owner
	sctx, cancel := context.WithTimeout(ctx, rn.c.TaskTimeout)
	r := &restore{cancel: cancel, done: make(chan struct{}), fence: true}
	rn.restores[n] = r
	rn.restoreWG.Add(1)
	go func() {
		defer rn.restoreWG.Done()
		t, err := task.Start(sctx, rn.taskConfig(n, owner), rn.proc)
		cancel()

		rn.mu.Lock()
		defer rn.mu.Unlock()
		defer close(r.done)
		if rn.restores[n] != r || ctx.Err() != nil {
			// Revoked meanwhile (release forgot the task), or the
			// client is closing.
			if t != nil {
				if cerr := t.Close(); cerr != nil && ctx.Err() == nil {
					rn.setFatal(fmt.Errorf("runner: closing task %d: %w", n, cerr))
				}
			}
			return
		}
		delete(rn.restores, n)
		if err != nil {
			if rn.startFailed(n, err) {
				return // queued for a restart
			}
			rn.setFatal(fmt.Errorf("runner: starting task %d: %w", n, err))
			return
		}
		rn.pending[n] = t
		rn.ops.Started(n)
		rn.publishTasks()
		rn.poke() // the main loop starts its restore
	}()
}

// onRevoked releases the tasks of the revoked (or lost) partitions; the
// others keep running, their workers, producers and open transactions
// untouched. With the cooperative group, kgo calls it with what moves
// away, with nothing at the end of every group session, and with
// everything when the member leaves the group.
func (rn *run) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	rn.ops.Rebalance(false)
	ns := map[int32]bool{}
	for _, ps := range revoked {
		for _, p := range ps {
			ns[p] = true
		}
	}
	if len(ns) == 0 {
		return
	}
	rn.release(ns)
	rn.syncStandbys() // a task revoked here may be a standby of this instance now
	rn.c.Logger.Info("partitions revoked", "revoked", revoked)
}

// release stops the tasks in ns (every task when ns is nil). The worker of
// each running task stops and, unless Run is failing, commits what its
// task processed (its queued records are dropped; their offsets were
// never committed, and the next owner reads them again); a restore in
// progress is cut short, and a start (fence) in progress is waited for
// (unless Run is ending). Then each task is closed, aborting what is still
// open. A worker's wait is bounded, each step by BatchTimeout: the chunk
// it is on (a stuck transform is abandoned), that chunk's Add (which opens
// the transaction with AddOffsetsToTxn when none is open yet), the commit;
// then the close's abort of whatever is still open, by txn.AbortTimeout.
func (rn *run) release(ns map[int32]bool) {
	var (
		workers []*worker
		tasks   []*task.Task
		waits   []chan struct{}
	)
	rn.mu.Lock()
	for n, w := range rn.workers {
		if ns == nil || ns[n] {
			w.requestStop()
			workers = append(workers, w)
			delete(rn.workers, n)
		}
	}
	for _, m := range []map[int32]*task.Task{rn.tasks, rn.pending} {
		for n, t := range m {
			if ns == nil || ns[n] {
				tasks = append(tasks, t)
				delete(m, n)
			}
		}
	}
	// A fence cut short may still reach the broker, after the next
	// owner's fence, and fence that owner: a revocation waits for a start
	// in progress. Run's end cuts it short (the client is closing).
	ending := rn.closing.Load() || rn.fatalErr() != nil
	for n, r := range rn.restores {
		if ns == nil || ns[n] {
			if !r.fence || ending {
				r.cancel()
			} else {
				rn.c.Logger.Debug("task revoked while it starts; waiting for its fence", "partition", n)
			}
			waits = append(waits, r.done)
			delete(rn.restores, n) // a restore or a restart sees it was revoked
		}
	}
	// No restart of a released task from here on (restartTask sees it
	// torn down); its queued request is forgotten after the waits below.
	for n := range rn.restarting {
		if ns == nil || ns[n] {
			delete(rn.restarting, n)
		}
	}
	for n := range rn.seeks {
		if ns == nil || ns[n] {
			delete(rn.seeks, n)
		}
	}
	rn.mu.Unlock()

	for _, w := range workers {
		<-w.done
	}
	for _, d := range waits {
		<-d
	}
	rn.mu.Lock()
	// After the waits: a worker that failed as it was stopped may have
	// queued a restart of its task (requestRestart) meanwhile.
	if ns == nil {
		rn.forgetAll()
	} else {
		for n := range ns {
			rn.forget(n)
		}
	}
	rn.publishTasks() // before any store closes: waits for running queries
	rn.mu.Unlock()
	var errs []error
	for _, t := range tasks {
		errs = append(errs, t.Close())
	}
	if err := errors.Join(errs...); err != nil {
		rn.setFatal(fmt.Errorf("runner: closing tasks: %w", err))
	}
}
