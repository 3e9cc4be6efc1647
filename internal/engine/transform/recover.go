package transform

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/group"
	"github.com/flechtwerk/flechtwerk/internal/topics"
	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/task"
)

// Recovery from transient broker faults, as Kafka Streams does it: a task
// whose transaction fails with a transient error (txn.Transient: a
// coordinator that moved or is restarting, a request that timed out, a
// network error, a rebalancing group, an end of unknown outcome, a produce
// refused out of sequence, a producer re-initialized under the open
// transaction) is closed dirty (its transaction aborted if the broker can
// be reached; the store never received anything uncommitted) and
// re-initialized in place by the main loop: a new producer fences the task's static transactional ID
// (which aborts whatever of the failed transaction is still open and
// settles an end of unknown outcome), the store is restored warm from its
// checkpoint, and the task's input partitions are re-positioned at the
// group's committed offsets (read with require-stable after the fence).
// The member stays in the group and Run goes on. A task that keeps failing
// without one successful commit for TaskTimeout ends Run with a
// *flechtwerk.TaskTimeoutError; errors that are not transient (a fence by another
// owner, an authorization error, a transform error, ...) end Run at once.

// txnError marks an error of a task's transaction (beginning it, producing,
// committing), the only errors a task recovers from; a transform's error
// never is one, whatever it wraps.
type txnError struct{ err error }

func (e *txnError) Error() string { return e.err.Error() }
func (e *txnError) Unwrap() error { return e.err }

// recoverable reports whether err of a worker is a transient error of its
// task's transaction.
func recoverable(err error) bool {
	var te *txnError
	return errors.As(err, &te) && (txn.Transient(err) || errors.Is(err, errPartAborted))
}

// selfFenced reports whether err fences task n while it recovers (it
// failed and has not committed since its re-initialization). That fence
// may be this member's own: an InitProducerID of an earlier attempt whose
// outcome was unknown (it timed out) can reach the coordinator after the
// retry's. The task is then re-initialized once more, which fences again
// only while the stable group still assigns it to this member
// (stillOwns), so a real new owner is never fenced; TaskTimeout bounds it.
func (rn *run) selfFenced(n int32, err error) bool {
	var te *txnError
	if !errors.As(err, &te) || !fencing.IsFenced(err) {
		return false
	}
	rn.fmu.Lock()
	defer rn.fmu.Unlock()
	return rn.failing[n] != nil
}

// failing is a task that failed with a transient error and has not
// committed since.
type failing struct {
	cause  error
	since  time.Time // the first failure since the task's last commit
	tries  int       // re-initializations since then
	queued bool      // waiting for the main loop to re-initialize it
	w      *worker   // the worker that failed (nil: a start or a restore)
	next   time.Time // not before
}

// restartBackoff is the wait before the re-initialization after the
// tries-th, exponential from 50ms, capped at 5s.
func restartBackoff(tries int) time.Duration {
	return min(50*time.Millisecond<<min(tries, 10), 5*time.Second)
}

// requestRestart queues task n for re-initialization after cause, by its
// worker w as it exits (nil: a start or a restore that failed). The main
// loop does it (restartTask).
func (rn *run) requestRestart(n int32, w *worker, cause error) {
	rn.fmu.Lock()
	f := rn.failing[n]
	if f == nil {
		f = &failing{since: time.Now()}
		rn.failing[n] = f
	}
	f.cause, f.queued, f.w = cause, true, w
	wait := restartBackoff(f.tries)
	f.next = time.Now().Add(wait)
	rn.fmu.Unlock()
	time.AfterFunc(wait, rn.poke)
	rn.poke()
}

// committed tells that task n committed: it recovered.
func (rn *run) committed(n int32) {
	rn.fmu.Lock()
	if f := rn.failing[n]; f != nil && !f.queued {
		delete(rn.failing, n)
		rn.fmu.Unlock()
		rn.c.Logger.Info("task recovered: committed after re-initialization", "partition", n, "restarts", f.tries, "after", time.Since(f.since).Round(time.Millisecond))
		return
	}
	rn.fmu.Unlock()
}

// restartFailed re-initializes every task queued by requestRestart whose
// backoff passed.
func (rn *run) restartFailed(ctx context.Context) error {
	now := time.Now()
	rn.fmu.Lock()
	var due []int32
	for n, f := range rn.failing {
		if f.queued && !now.Before(f.next) {
			due = append(due, n)
		}
	}
	rn.fmu.Unlock()
	slices.Sort(due)
	for _, n := range due {
		if err := rn.restartTask(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// restartTask closes task n dirty and starts it again (the fence on its
// own goroutine, refence): a new producer
// fences its transactional ID; the main loop then restores it
// (startRestores), and its restore queues the re-seek of its partitions
// (applySeeks). Its partitions stay paused, and records still fetched for
// them are dropped, until then. The start is tracked like a restore, so a
// revocation of the task waits for it (release).
func (rn *run) restartTask(ctx context.Context, n int32) error {
	c := rn.c
	rn.mu.Lock()
	rn.fmu.Lock()
	f := rn.failing[n]
	early := f != nil && time.Now().Before(f.next)
	rn.fmu.Unlock()
	if f == nil || !f.queued || rn.restores[n] != nil || early {
		// Not queued, being re-initialized, or an attempt that ended
		// since restartFailed picked it set a later time.
		rn.mu.Unlock()
		return nil
	}
	w := rn.workers[n]
	if w != nil && w != f.w {
		// A request of an earlier incarnation of the task (a
		// revocation released it and it came back, running again):
		// the task running now has not failed.
		rn.forget(n)
		rn.mu.Unlock()
		return nil
	}
	if w == nil && rn.tasks[n] == nil && !rn.restarting[n] {
		// Torn down by a rebalance since it failed.
		rn.forget(n)
		rn.mu.Unlock()
		return nil
	}
	if since := time.Since(f.since); since > c.TaskTimeout {
		rn.mu.Unlock()
		return &flechtwerk.TaskTimeoutError{Partition: n, Restarts: f.tries, Timeout: c.TaskTimeout, Err: f.cause}
	}
	if w != nil {
		<-w.done // it exited after queueing the restart
		delete(rn.workers, n)
	}
	rn.restarting[n] = true
	if t := rn.tasks[n]; t != nil {
		delete(rn.tasks, n)
		rn.publishTasks() // queries leave the store before it closes
		if err := t.Close(); err != nil {
			rn.mu.Unlock()
			return fmt.Errorf("runner: closing task %d after %v: %w", n, f.cause, err)
		}
	}
	c.Logger.Warn("task failed with a transient error; closed dirty (its open transaction aborted, nothing uncommitted visible), re-initializing it",
		"partition", n, "cause", f.cause, "attempt", f.tries+1, "failing_for", time.Since(f.since).Round(time.Millisecond))
	sctx, cancel := context.WithTimeout(ctx, c.TaskTimeout)
	r := &restore{cancel: cancel, done: make(chan struct{}), fence: true}
	rn.restores[n] = r
	rn.restoreWG.Add(1)
	rn.mu.Unlock()
	// The ownership check and the fence run beside the main loop, like a
	// new task's start (startTask): the poll, and every other task, goes
	// on meanwhile.
	go func() {
		defer rn.restoreWG.Done()
		if err := rn.refence(ctx, sctx, cancel, n, f, r); err != nil {
			rn.setFatal(err)
		}
	}()
	return nil
}

// refence is the second half of restartTask, on its own goroutine: it
// checks that the group still assigns task n to this member, fences its
// transactional ID with a new producer and makes the task pending, or
// queues the next attempt.
func (rn *run) refence(ctx, sctx context.Context, cancel context.CancelFunc, n int32, f *failing, r *restore) error {
	c := rn.c
	var t *task.Task
	owner, owned, err := rn.stillOwns(sctx, n)
	if err == nil && owned {
		t, err = task.Start(sctx, rn.taskConfig(n, owner), rn.proc)
	}
	cancel()

	rn.mu.Lock()
	defer rn.mu.Unlock()
	defer close(r.done)
	revoked := rn.restores[n] != r
	if !revoked {
		delete(rn.restores, n)
	}
	if revoked || ctx.Err() != nil {
		if t != nil {
			if cerr := t.Close(); cerr != nil && ctx.Err() == nil {
				return fmt.Errorf("runner: closing task %d: %w", n, cerr)
			}
		}
		return nil
	}
	rn.fmu.Lock()
	defer rn.fmu.Unlock()
	f.tries++
	if err == nil && !owned {
		// Fencing now could fence the task's new owner: wait for the
		// rebalance (its revocation forgets this restart) or the
		// member's rejoin.
		c.Logger.Warn("task not re-initialized yet: the group is rebalancing or no longer assigns it to this member", "partition", n)
		f.next = time.Now().Add(restartBackoff(f.tries))
		time.AfterFunc(restartBackoff(f.tries), rn.poke)
		return nil
	}
	if err != nil {
		if !txn.Transient(err) {
			return fmt.Errorf("runner: re-initializing task %d after %v: %w", n, f.cause, err)
		}
		f.cause = err
		f.next = time.Now().Add(restartBackoff(f.tries))
		time.AfterFunc(restartBackoff(f.tries), rn.poke)
		return nil
	}
	f.queued = false
	rn.owners[n] = owner
	rn.pending[n] = t
	rn.ops.Started(n)
	rn.ops.Restarted(n)
	c.Metrics.TaskRestarted(n)
	rn.publishTasks()
	rn.poke() // the main loop starts its restore
	return nil
}

// stillOwns reports whether the group, stable, still assigns partition n of
// every input topic to this member, and the member's ID: a member whose
// session is lost (a zombie woken after its partitions moved) or that is
// being rebalanced must not fence the task's transactional ID again, which
// could fence the new owner.
func (rn *run) stillOwns(ctx context.Context, n int32) (string, bool, error) {
	c := rn.c
	member, _ := rn.consumer.GroupMetadata()
	gs, err := rn.adm.DescribeGroups(ctx, c.Group())
	if err != nil {
		return "", false, fmt.Errorf("describing group %s: %w", c.Group(), group.ACL(err, c.Group()))
	}
	g, ok := gs[c.Group()]
	if !ok {
		return "", false, nil
	}
	if g.Err != nil {
		return "", false, fmt.Errorf("describing group %s: %w", c.Group(), group.ACL(g.Err, c.Group()))
	}
	if g.State != "Stable" || member == "" {
		return "", false, nil
	}
	for _, m := range g.Members {
		if m.MemberID != member {
			continue
		}
		a, ok := m.Assigned.AsConsumer()
		if !ok {
			return "", false, nil
		}
		held := 0
		for _, t := range a.Topics {
			if slices.Contains(c.InputTopics, t.Topic) && slices.Contains(t.Partitions, n) {
				held++
			}
		}
		return member, held == len(c.InputTopics), nil
	}
	return "", false, nil
}

// committedOffsets reads the committed offsets of task n's partitions
// (require-stable: the fence settled every transaction of the task), for
// the positioning of a restarted or newly assigned task; a partition
// without a committed offset starts at the beginning, like a new
// assignment. Only the task's own partitions are asked for: the other
// tasks' transactions, which keep committing, would make a require-stable
// fetch of the whole group answer UNSTABLE_OFFSET_COMMIT nearly all the
// time on Apache Kafka. An error is handled like a failed restore
// (restoreFailed): a transient one queues the restart again.
func (rn *run) committedOffsets(ctx context.Context, n int32) (map[string]kgo.EpochOffset, error) {
	c := rn.c
	got, err := group.FetchTaskCommitted(ctx, rn.consumer, c.Logger, c.Group(), c.InputTopics, n)
	if err != nil {
		return nil, fmt.Errorf("task %d: fetching its committed offsets: %w", n, group.ACL(err, c.Group()))
	}
	offs := make(map[string]kgo.EpochOffset, len(c.InputTopics))
	for _, topic := range c.InputTopics {
		at := int64(0) // no commit: from the start (the reset offset)
		if o := got[topic]; o >= 0 {
			at = o
		}
		offs[topic] = kgo.EpochOffset{Epoch: -1, Offset: at}
	}
	return offs, nil
}

// restoreFailed queues the restart of pending task n (assigned, or
// re-initialized) when its restore failed with a transient error, and
// closes it; the caller holds the batch lock. Its partitions stay paused
// until the restarted task re-positioned them.
func (rn *run) restoreFailed(n int32, t *task.Task, err error) bool {
	if !txn.Transient(err) && !errors.Is(err, kerr.UnstableOffsetCommit) {
		return false
	}
	delete(rn.pending, n)
	if cerr := t.Close(); cerr != nil {
		return false
	}
	rn.restarting[n] = true
	rn.requestRestart(n, nil, fmt.Errorf("runner: restoring task %d: %w", n, err))
	return true
}

// startFailed queues the restart of newly assigned task n when its start
// (the fence) failed with a transient error; the caller holds the batch
// lock. Its partitions stay paused until the restarted task re-positioned
// them.
func (rn *run) startFailed(n int32, err error) bool {
	if !txn.Transient(err) {
		return false
	}
	rn.restarting[n] = true
	rn.requestRestart(n, nil, err)
	return true
}

// applySeeks re-positions the partitions of every re-initialized task at
// its committed offsets and resumes them. It runs while the poll's
// rebalance is blocked (kgo.BlockRebalanceOnPoll), after the poll's records
// were handed out: those of a restarting task were dropped, and SetOffsets
// discards whatever the client still buffered for its partitions.
func (rn *run) applySeeks() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if len(rn.seeks) == 0 {
		return
	}
	set := map[string]map[int32]kgo.EpochOffset{}
	ns := make([]int32, 0, len(rn.seeks))
	for n, offs := range rn.seeks {
		for topic, o := range offs {
			if set[topic] == nil {
				set[topic] = map[int32]kgo.EpochOffset{}
			}
			set[topic][n] = o
		}
		ns = append(ns, n)
		delete(rn.restarting, n)
		delete(rn.seeks, n)
	}
	slices.Sort(ns)
	rn.consumer.SetOffsets(set)
	rn.consumer.ResumeFetchPartitions(rn.topicPartitions(ns...))
	rn.fmu.Lock()
	defer rn.fmu.Unlock()
	for _, n := range ns {
		if rn.failing[n] == nil {
			continue // newly assigned (onAssigned)
		}
		rn.c.Logger.Warn("task re-initialized: fenced, restored, and re-reading its input from the committed offsets", "partition", n, "offsets", set)
	}
}

// forget drops task n's recovery state (it was torn down); the caller holds
// the batch lock.
func (rn *run) forget(n int32) {
	delete(rn.restarting, n)
	delete(rn.seeks, n)
	rn.fmu.Lock()
	delete(rn.failing, n)
	rn.fmu.Unlock()
}

// forgetAll drops the recovery state of every task (all were torn down);
// the caller holds the batch lock.
func (rn *run) forgetAll() {
	clear(rn.restarting)
	clear(rn.seeks)
	rn.fmu.Lock()
	clear(rn.failing)
	rn.fmu.Unlock()
}

// taskConfig is the task.Config of task n, run under the group member ID
// owner: its transactions' offsets carry the member's identity while the
// member has that ID, and none once it rejoined under another (the
// commit is then refused, and the task re-initialized after the
// ownership check).
func (rn *run) taskConfig(n int32, owner string) task.Config {
	c := rn.c
	member := func() (string, int32) {
		id, gen := rn.consumer.GroupMetadata()
		if id != owner {
			return "", -1
		}
		return id, gen
	}
	return task.Config{
		ApplicationID:      c.ApplicationID,
		Partition:          n,
		InputTopics:        c.InputTopics,
		TopicIDs:           rn.topicIDs,
		OffsetsMetadata:    rn.offsetsMeta,
		Changelog:          rn.changelog,
		StateDir:           c.StateDir,
		TransactionTimeout: c.TransactionTimeout,
		KafkaOpts:          rn.base,
		Logger:             c.Logger,
		Member:             member,
		TracerProvider:     c.TracerProvider,
		Propagator:         c.Propagator,
		Policy:             rn.policy,
		MaxTimers:          c.MaxTimers,
		Lane:               rn.lane(),
	}
}

// lane returns the shared-producer mode's lane (nil: the default mode).
func (rn *run) lane() *task.Lane {
	if rn.shared == nil {
		return nil
	}
	return rn.shared.lane
}

// groupSession decides about a lost group session reported by a poll
// (*kgo.ErrGroupSession; kgo already called OnPartitionsLost, which tore
// every task down dirty, and rejoins by itself): a refused ACL ends Run
// naming it, any other non-transient cause ends Run too, and a transient one
// is logged and ridden out for up to TaskTimeout since the member last held
// an assignment.
func (rn *run) groupSession(err error) error {
	c := rn.c
	if aerr := group.ACL(err, c.Group()); aerr != err {
		return fmt.Errorf("runner: the consumer group member cannot join group %q: %w", c.Group(), aerr)
	}
	if errors.Is(err, kerr.InconsistentGroupProtocol) {
		mode, other := "a producer per task", "runner.SharedProducer"
		if c.SharedProducer {
			mode, other = "runner.SharedProducer", "a producer per task (the default)"
		}
		return errors.Join(flechtwerk.Errorf(flechtwerk.CodeTransactionModeMismatch, "SharedProducer",
			"group %q has members that run %s (or another application's consumers); this instance runs %s. Every instance of an application runs the same mode: to switch, stop every instance, then start them in the new mode",
			c.Group(), other, mode), err)
	}
	if !txn.Transient(err) {
		return group.FetchError("", 0, err)
	}
	rn.fmu.Lock()
	if rn.groupLostAt.IsZero() {
		rn.groupLostAt = time.Now()
	}
	lostFor := time.Since(rn.groupLostAt)
	rn.fmu.Unlock()
	if lostFor > c.TaskTimeout {
		return &flechtwerk.TaskTimeoutError{Partition: -1, Step: "rejoining the consumer group", Timeout: c.TaskTimeout, Err: group.FetchError("", 0, err)}
	}
	c.Logger.Warn("lost the consumer group session with a transient error; its tasks were closed dirty, the member rejoins", "group", c.Group(), "err", err, "lost_for", lostFor.Round(time.Millisecond))
	return nil
}

// groupJoined tells that the member holds an assignment again.
func (rn *run) groupJoined() {
	rn.fmu.Lock()
	rn.groupLostAt = time.Time{}
	rn.fmu.Unlock()
}

// onLost tears every task down dirty: the member lost its session, so
// another member may own the tasks already; nothing is committed (it would
// be fenced, or race the new owner's fence), every open transaction is
// aborted.
func (rn *run) onLost(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	rn.lost.Store(true)
	defer rn.lost.Store(false)
	rn.c.Logger.Warn("consumer group session lost; closing every task dirty", "lost", lost)
	rn.onRevoked(ctx, cl, lost)
}

// benign reports whether err of a worker that was told to stop, by a
// rebalance or by a graceful stop of Run, needs no more than the
// teardown: a transient error or a fence (the task moved to another
// member already). Its transaction was aborted (or is aborted by
// the next fence); nothing of it is visible and the next owner reprocesses
// its records, exactly as after a crash, so a graceful stop still returns
// nil.
func (rn *run) benign(err error) bool {
	return recoverable(err) || fencing.IsFenced(err)
}

// startupRetry runs a startup step fn again while it fails with a transient
// error (txn.Transient), for up to TaskTimeout, with backoff: it is used
// once the cluster answered (a cluster that cannot be reached at all, or a
// misconfigured client, fails the first step, which is not retried). Every
// retry is logged at warn with its cause.
func startupRetry(ctx context.Context, c *config.Options, what string, fn func() error) error {
	began := time.Now()
	for tries := 0; ; tries++ {
		err := fn()
		if err == nil || !txn.Transient(err) || ctx.Err() != nil {
			return err
		}
		if time.Since(began) > c.TaskTimeout {
			return &flechtwerk.TaskTimeoutError{Partition: -1, Step: what, Timeout: c.TaskTimeout, Err: err}
		}
		c.Logger.Warn("startup step failed with a transient error; retrying", "step", what, "err", err, "attempt", tries+1)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(restartBackoff(tries)):
		}
	}
}

// describeInputs describes the input topics, the first request of Run. A
// connection the broker accepted and then dropped (a broker restarting, a
// proxy cutting connections) is retried a few times, for about a second;
// every other error, a refused dial and a silent broker among them, is
// returned at once, so that a cluster that cannot be reached, or a client
// that is misconfigured, fails fast.
func describeInputs(ctx context.Context, c *config.Options, adm *kadm.Client) (map[string]topics.Info, int32, error) {
	for tries := 0; ; tries++ {
		infos, n, err := topics.Describe(ctx, adm, "input", c.InputTopics)
		if err == nil || !txn.Dropped(err) || tries >= 4 || ctx.Err() != nil {
			return infos, n, err
		}
		c.Logger.Warn("describing the input topics met a dropped connection; retrying", "err", err, "attempt", tries+1)
		select {
		case <-ctx.Done():
			return infos, n, err
		case <-time.After(restartBackoff(tries)):
		}
	}
}
