package transform

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/task"
)

// LoopTick is the longest a poll of the main loop waits for records: the
// loop comes round at least that often, records or not.
const LoopTick = 5 * time.Second

// loop polls and hands every partition's records to its task's worker
// until ctx is canceled, the client closes or an error (of a worker, a
// poll, or a group callback) ends it. It never waits for a task's
// processing or commit.
func (rn *run) loop(ctx context.Context) error {
	for {
		if err := rn.fatalErr(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := rn.restartFailed(ctx); err != nil {
			return err
		}
		rn.startRestores(ctx)
		rn.ops.Tick()

		// A poll ends after LoopTick without records, so that the loop
		// comes round (liveness, see Runner.Healthy).
		pollCtx, cancel := context.WithTimeout(ctx, LoopTick)
		stop := make(chan struct{})
		go func() {
			select {
			case <-rn.wake:
				cancel()
			case <-stop:
			}
		}()
		// Every buffered partition at once: a capped poll drains one
		// partition's fetch first, which would feed one task at a time.
		fetches := rn.consumer.PollFetches(pollCtx)
		close(stop)
		cancel()

		if fetches.IsClientClosed() {
			rn.consumer.AllowRebalance()
			return nil
		}
		if ferr := rn.fetchErr(fetches); ferr != nil {
			rn.consumer.AllowRebalance()
			return ferr
		}
		err := rn.distribute(fetches)
		rn.applySeeks()
		rn.consumer.AllowRebalance()
		if err != nil {
			return err
		}
	}
}

// distribute queues each partition's records at its task's worker.
func (rn *run) distribute(fetches kgo.Fetches) error {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	var err error
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if err != nil || len(p.Records) == 0 || rn.restarting[p.Partition] {
			// A restarting task re-reads from its committed offsets.
			return
		}
		w := rn.workers[p.Partition]
		if w == nil {
			// Cannot happen: a partition resumes only once its task
			// runs, and a revocation (blocked while records are handed
			// out) drops the partition's buffered records before the
			// task is released. A record here would be silently
			// skipped, so stop instead.
			r := p.Records[0]
			err = fmt.Errorf("runner: fetched topic %s partition %d offset %d, which no running task owns", r.Topic, r.Partition, r.Offset)
			return
		}
		w.push(p.Records)
	})
	return err
}

// worker runs one task's batches and commits, on its own goroutine: it
// takes queued records in chunks of at most MaxPollRecords, adds each
// processed chunk to the task's open transaction, and commits it when the
// commit interval passed, a bound is reached, or it is told to stop.
type worker struct {
	rn *run
	t  *task.Task

	mu     sync.Mutex
	queue  []*kgo.Record
	qbytes int64
	paused bool
	failed bool          // its task failed: it takes no more records
	signal chan struct{} // a record was queued
	stop   chan struct{} // closed: commit what was processed and exit
	done   chan struct{} // closed when the worker exited

	stopOnce sync.Once
	// retryAt: an offsets-only commit met a rebalance and is tried again
	// from then on (see commit).
	retryAt time.Time
	// first is the first offset per input topic of what the task
	// processed and did not commit (for BatchTimeoutError).
	first map[string]int64
	// owner is the member ID the task runs under (run.owners).
	owner string
	// lastTick is when the worker last ran a tick (tickDue).
	lastTick time.Time
}

func (rn *run) startWorker(t *task.Task, owner string) *worker {
	w := &worker{
		rn:     rn,
		t:      t,
		owner:  owner,
		signal: make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go w.run()
	return w
}

// The queue of a task is bounded: beyond queueRecords records or
// queueBytes bytes its partitions are paused (their buffered records are
// fetched again after the resume), and resumed below half of both.
func (w *worker) queueRecords() int { return max(4*w.rn.c.MaxPollRecords, 2000) }

const queueBytes = 16 << 20

// push queues recs (of the main loop; never blocks on the worker).
func (w *worker) push(recs []*kgo.Record) {
	w.mu.Lock()
	if w.failed {
		w.mu.Unlock()
		return
	}
	w.queue = append(w.queue, recs...)
	for _, r := range recs {
		w.qbytes += int64(len(r.Key) + len(r.Value))
	}
	if !w.paused && (len(w.queue) > w.queueRecords() || w.qbytes > queueBytes) {
		w.paused = true
		w.rn.consumer.PauseFetchPartitions(w.rn.topicPartitions(w.t.Partition()))
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// take removes up to n queued records.
func (w *worker) take(n int) []*kgo.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	n = min(n, len(w.queue))
	if n == 0 {
		return nil
	}
	recs := w.queue[:n:n]
	w.queue = w.queue[n:]
	for _, r := range recs {
		w.qbytes -= int64(len(r.Key) + len(r.Value))
	}
	if len(w.queue) == 0 {
		w.queue = nil
	}
	if w.paused && len(w.queue) <= w.queueRecords()/2 && w.qbytes <= queueBytes/2 {
		w.paused = false
		w.rn.consumer.ResumeFetchPartitions(w.rn.topicPartitions(w.t.Partition()))
	}
	return recs
}

// wake wakes the worker when it waits for records.
func (w *worker) wake() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// requestStop tells the worker to commit what it processed and exit; it
// takes no more records. Queued records are dropped: their offsets were
// never committed, and the next owner processes them.
func (w *worker) requestStop() { w.stopOnce.Do(func() { close(w.stop) }) }

func (w *worker) run() {
	defer close(w.done)
	err := w.work()
	if w.rn.shared != nil {
		// A shared transaction the task is still in never commits
		// without its part.
		w.leaveShared(err)
	}
	if err == nil {
		return
	}
	n := w.t.Partition()
	// Read once: a revocation that lands between two reads would send a
	// transient error to the default case.
	stopping := w.stopping()
	switch {
	case w.rn.fatalErr() != nil:
		return // Run ends anyway
	case stopping && w.rn.benign(err):
		// A rebalance or Run's stop tears the task down: its
		// transaction is aborted and the next owner reprocesses its
		// records.
		what := "a rebalance"
		if w.rn.closing.Load() {
			what = "Run's stop"
		}
		w.rn.c.Logger.Warn("task's last commit before "+what+" failed; its transaction is aborted, its records are reprocessed by the next owner",
			"partition", n, "err", err)
	case !stopping && (recoverable(err) || w.rn.selfFenced(n, err)):
		// Closed dirty and re-initialized by the main loop: no more
		// records, the partitions paused until the re-seek.
		w.mu.Lock()
		w.failed = true
		w.queue, w.qbytes = nil, 0
		if !w.paused {
			w.paused = true
			w.rn.consumer.PauseFetchPartitions(w.rn.topicPartitions(n))
		}
		w.mu.Unlock()
		w.rn.requestRestart(n, w, err)
	default:
		w.rn.setFatal(err)
	}
}

func (w *worker) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *worker) work() error {
	c := w.rn.c
	for {
		if w.rn.fatalErr() != nil {
			return nil // Run ends; the task is closed, its transaction aborted
		}
		if w.stopping() {
			if w.rn.lost.Load() {
				return nil // lost: closed dirty, nothing committed
			}
			return w.commit()
		}
		if sh := w.rn.shared; sh != nil {
			// A sealed shared transaction waits for the task's part.
			if r := sh.roundOf(w.t); r != nil {
				if err := w.takePart(r); err != nil {
					return err
				}
				continue
			}
		}
		p := w.t.Pending()
		if p.Offsets != nil {
			due := w.rn.tick(p.Since)
			if !p.Txn && w.retryAt.After(due) {
				due = w.retryAt
			}
			if p.Txn {
				// Commit before the broker's transaction timeout could
				// abort the transaction under a chunk and its commit.
				if late := p.Began.Add(c.TransactionTimeout - c.BatchTimeout); late.Before(due) {
					due = late
				}
			}
			if !time.Now().Before(due) || (p.Txn && (p.Records >= c.CommitMaxRecords || p.Bytes >= c.CommitMaxBytes)) {
				if err := w.commit(); err != nil {
					return err
				}
				continue
			}
			recs := w.take(c.MaxPollRecords)
			if len(recs) == 0 {
				wall, ticked, err := w.tickDue()
				if err != nil || ticked {
					if err != nil {
						return err
					}
					continue
				}
				if !wall.IsZero() && wall.Before(due) {
					due = wall
				}
				timer := time.NewTimer(time.Until(due))
				select {
				case <-w.signal:
				case <-w.stop:
				case <-timer.C:
				}
				timer.Stop()
				continue
			}
			if err := w.process(recs); err != nil {
				return err
			}
			continue
		}
		recs := w.take(c.MaxPollRecords)
		if len(recs) == 0 {
			wall, ticked, err := w.tickDue()
			if err != nil {
				return err
			}
			if ticked {
				continue
			}
			var timer *time.Timer
			var at <-chan time.Time
			if !wall.IsZero() {
				// The idle worker wakes for the next wall-clock timer.
				timer = time.NewTimer(time.Until(wall))
				at = timer.C
			}
			select {
			case <-w.signal:
			case <-w.stop:
			case <-at:
			}
			if timer != nil {
				timer.Stop()
			}
			continue
		}
		if err := w.process(recs); err != nil {
			return err
		}
	}
}

// tick returns the end of the commit interval that since falls in: the
// first of the run's ticks (every CommitInterval from the start of Run)
// after since. Every task commits at the same ticks, so the transactions
// of all tasks end together. They all write to the same output
// partitions, whose last stable offset a read_committed reader waits for
// is held back by the oldest transaction open on the partition, of any
// task: with intervals of their own, some task's transaction would almost
// always be open, and an output would wait for the transactions of other
// tasks that began before it, up to a whole interval after its own
// commit.
func (rn *run) tick(since time.Time) time.Time {
	d := rn.c.CommitInterval
	n := since.Sub(rn.epoch) / d
	return rn.epoch.Add((n + 1) * d)
}

// tickDue runs a tick of the task (task.Tick: a batch without records)
// when a timer is due (ticked): a wall-clock timer due by now, or an
// event-time timer due by the task's stream time (left over by the bound
// on timers per batch, or set again in the past by its callback).
// Otherwise it returns when the earliest wall-clock timer will be due
// (zero: none). Called when no record is queued: a chunk of records fires
// the due timers itself. Ticks are at least minTickGap apart, so that a
// callback that keeps setting its timer in the past does not spin the
// worker.
func (w *worker) tickDue() (next time.Time, ticked bool, err error) {
	if !w.t.HasTimers() {
		return time.Time{}, false, nil
	}
	due, err := w.t.TimersDue()
	if err != nil {
		return time.Time{}, false, &txnError{fmt.Errorf("runner: task %d: reading its timers: %w", w.t.Partition(), err)}
	}
	if due {
		next = time.Now()
	} else {
		var ok bool
		next, ok, err = w.t.NextWallDue()
		if err != nil {
			return time.Time{}, false, &txnError{fmt.Errorf("runner: task %d: reading its timers: %w", w.t.Partition(), err)}
		}
		if !ok {
			return time.Time{}, false, nil
		}
	}
	if gap := w.lastTick.Add(minTickGap); next.Before(gap) {
		next = gap
	}
	if time.Now().Before(next) {
		return next, false, nil
	}
	w.lastTick = time.Now()
	return time.Time{}, true, w.process(nil)
}

// minTickGap is the shortest time between two ticks of a task.
const minTickGap = 10 * time.Millisecond

// process runs one chunk, bounded by BatchTimeout, and adds it to the
// task's open transaction; a nil chunk is a tick (task.Tick). A transform
// that outlives the deadline is abandoned (see BatchTimeout): its
// goroutine's late result is discarded.
func (w *worker) process(recs []*kgo.Record) error {
	c := w.rn.c
	if w.first == nil {
		w.first = map[string]int64{}
	}
	for _, r := range recs {
		if o, ok := w.first[r.Topic]; !ok || r.Offset < o {
			w.first[r.Topic] = r.Offset
		}
	}
	// The chunk finishes even when Run's ctx is canceled (graceful stop).
	ctx, cancel := context.WithTimeout(context.Background(), c.BatchTimeout)
	defer cancel()
	type result struct {
		b   *task.Batch
		err error
	}
	// Buffered: a goroutine abandoned at the deadline sends its late
	// result here and exits without a reader.
	res := make(chan result, 1)
	began := time.Now()
	go func() {
		var b *task.Batch
		var err error
		if recs == nil {
			b, err = w.t.Tick(ctx, w.rn.sem)
		} else {
			b, err = w.t.Process(ctx, recs, w.rn.sem)
		}
		res <- result{b, err}
	}()
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		// A transform that ignores ctx would hold the task (and so every
		// rebalance) forever: stop waiting for it.
		select {
		case r = <-res:
		default:
			return w.timeout()
		}
	}
	if r.err != nil {
		if ctx.Err() != nil && errors.Is(r.err, context.DeadlineExceeded) {
			return w.timeout() // the transform honored the deadline
		}
		c.Metrics.Aborted(w.t.Partition(), "transform", r.err)
		return fmt.Errorf("runner: %w", r.err)
	}
	transformed := time.Now()
	// Joining the open transaction (AddOffsetsToTxn when it opens) has a
	// deadline of its own: a transform that used most of the chunk's must
	// not make the broker's answer time out.
	actx, acancel := context.WithTimeout(context.Background(), c.BatchTimeout)
	defer acancel()
	if err := w.t.Add(actx, r.b); err != nil {
		c.Metrics.Aborted(w.t.Partition(), "commit", err)
		return &txnError{fmt.Errorf("runner: %w", err)}
	}
	c.Metrics.Chunk(r.b.Records, began, transformed)
	return nil
}

func (w *worker) timeout() error {
	n := w.t.Partition()
	w.rn.c.Metrics.Aborted(n, "timeout", nil)
	return &flechtwerk.BatchTimeoutError{Partitions: []int32{n}, Timeout: w.rn.c.BatchTimeout, FirstOffsets: map[int32]map[string]int64{n: w.first}}
}

// commit commits what the task processed: its open transaction, or, when
// it wrote nothing, its offsets through the group member.
func (w *worker) commit() error {
	p := w.t.Pending()
	if p.Offsets == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.rn.c.BatchTimeout)
	defer cancel()
	if p.Txn && w.rn.shared != nil {
		return w.commitShared()
	}
	if p.Txn {
		began := time.Now()
		st, err := w.t.CommitOpen(ctx)
		if st.Transactional() {
			w.committed(&st, time.Since(began))
		} else {
			w.rn.c.Metrics.CommitFailed(w.t.Partition(), time.Since(began), err)
		}
		if err != nil {
			return &txnError{fmt.Errorf("runner: %w", err)}
		}
		w.first = nil
		w.rn.committed(w.t.Partition())
		return nil
	}
	// A task that wrote nothing opens no transaction (the client would
	// never end an offsets-only one); the group member commits its
	// offsets, checked against its generation. No transaction of the task
	// is open now, and its earlier transactional commits ended before.
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for topic, off := range p.Offsets {
		offsets[topic] = map[int32]kgo.EpochOffset{w.t.Partition(): {Epoch: -1, Offset: off}}
	}
	stopping := w.stopping()
	if !stopping {
		// A running task's commit may meet a rebalance of the
		// cooperative group: the client holds commits back while it
		// joins and syncs (which lasts until every member rejoined), and
		// the coordinator may answer REBALANCE_IN_PROGRESS or
		// ILLEGAL_GENERATION around it. The task keeps its partitions
		// (a revocation stops the worker first), so it waits for the
		// answer, however long the rebalance takes, then goes on
		// processing and tries again later: the offsets stay pending,
		// and join the next transaction if a later batch writes
		// something. It never gives up on a commit it may have sent
		// (see below); a revocation or the end of Run stops the wait.
		var cancelWait context.CancelFunc
		ctx, cancelWait = context.WithTimeout(context.Background(), w.rn.c.TaskTimeout)
		defer cancelWait()
		go func() {
			select {
			case <-w.stop:
				cancelWait()
			case <-ctx.Done():
			}
		}()
	}
	if err := w.rn.commitDirect(ctx, offsets, w.owner); err != nil {
		if !stopping && w.stopping() && errors.Is(err, context.Canceled) {
			// Released while it waited: the next owner reads these
			// records again (they wrote nothing); a commit of them
			// still under way is valid or refused by the generation.
			w.rn.c.Logger.Debug("offsets-only commit given up: the task is released", "partition", w.t.Partition())
			return nil
		}
		if !stopping && (errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.IllegalGeneration)) {
			w.retryAt = time.Now().Add(directCommitWait)
			w.rn.c.Logger.Debug("offsets-only commit deferred by a rebalance", "partition", w.t.Partition(), "err", err)
			return nil
		}
		w.rn.c.Metrics.Aborted(w.t.Partition(), "commit", err)
		var answered *kerr.Error
		if stopping || w.stopping() || errors.As(err, &answered) {
			// The coordinator answered (nothing was written), or the
			// task is being released: its member's generation ends
			// before anyone commits this partition again, and a
			// commit of it still under way is refused then.
			return &txnError{fmt.Errorf("runner: task %d: %w", w.t.Partition(), err)}
		}
		// No answer: the request may still reach the coordinator and,
		// checked against the member's generation that is still valid,
		// overwrite a later commit of this partition (by a re-initialized
		// task of this member). Run ends instead; the member leaves the
		// group, which refuses the request from then on.
		return fmt.Errorf("runner: task %d: offsets-only commit without an answer (it may still be applied): %w", w.t.Partition(), err)
	}
	w.retryAt = time.Time{}
	st := w.t.OffsetsCommitted()
	w.committed(&st, 0)
	w.first = nil
	w.rn.committed(w.t.Partition())
	return nil
}

// directCommitWait is how long a running task waits to commit its offsets
// again after a rebalance refused an offsets-only commit.
const directCommitWait = time.Second

// committed records a commit of the task's records in the metrics.
func (w *worker) committed(st *task.Stats, d time.Duration) {
	if hook := w.rn.hooks.Committed; hook != nil {
		hook(w.t.Partition())
	}
	m := w.rn.c.Metrics
	if m == nil {
		return
	}
	m.Committed(w.t.Partition(), st, d)
	skipped, substituted, dead := st.Invalid()
	m.InvalidRecords(batch.Skip.String(), skipped)
	m.InvalidRecords(batch.Substitute.String(), substituted)
	m.InvalidRecords(batch.DeadLetter.String(), dead)
	m.DeadLetter(w.rn.c.DeadLetterTopic(), dead)
}
