package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/task"
)

// loop polls and runs batches until ctx is canceled, the client closes or
// an error (of a batch, a poll, or a group callback) ends it.
func (rn *run) loop(ctx context.Context) error {
	c := &rn.r.cfg
	for {
		if err := rn.fatalErr(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := rn.initPending(ctx); err != nil {
			return err
		}

		pollCtx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-rn.wake:
				cancel()
			case <-stop:
			}
		}()
		fetches := rn.consumer.PollRecords(pollCtx, c.MaxPollRecords)
		close(stop)
		cancel()

		if fetches.IsClientClosed() {
			return nil
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			if ferr == nil {
				ferr = fetchError(t, p, err)
			}
		})
		if ferr != nil {
			rn.consumer.AllowRebalance()
			return ferr
		}
		recs := fetches.Records()
		if len(recs) == 0 {
			rn.consumer.AllowRebalance()
			continue
		}
		err := rn.batch(ctx, recs)
		rn.consumer.AllowRebalance()
		if err != nil {
			return err
		}
	}
}

// batch processes and commits one poll's records, one transaction per task.
func (rn *run) batch(ctx context.Context, recs []*kgo.Record) error {
	c := &rn.r.cfg
	rn.mu.Lock()
	defer rn.mu.Unlock()
	defer rn.r.cfg.Metrics.Batch(len(recs), time.Now())

	byTask := map[int32][]*kgo.Record{}
	for _, rec := range recs {
		if _, ok := rn.tasks[rec.Partition]; !ok {
			// Cannot happen with eager range assignment and rebalances
			// blocked while a batch runs; a record here would be
			// silently skipped, so stop instead.
			return fmt.Errorf("runner: fetched topic %s partition %d offset %d, which no running task owns", rec.Topic, rec.Partition, rec.Offset)
		}
		byTask[rec.Partition] = append(byTask[rec.Partition], rec)
	}
	// The batch finishes even when ctx is canceled (graceful stop); it is
	// bounded by BatchTimeout.
	deadline := time.Now().Add(c.BatchTimeout)
	bctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()

	type result struct {
		t   *task.Task
		b   *task.Batch
		err error
	}
	// Buffered for every task: a goroutine abandoned at the deadline
	// sends its late result here and exits without a reader.
	results := make(chan result, len(byTask))
	// A task enters its commit only while the batch is not abandoned;
	// once it did, the batch waits for it (a commit is bounded by the
	// deadline and its abort), so a task named in a BatchTimeoutError
	// never committed anything of the batch.
	var (
		phaseMu    sync.Mutex
		abandoned  bool
		committing = make(map[int32]bool, len(byTask))
	)
	for n, trecs := range byTask {
		t := rn.tasks[n]
		go func() {
			began, commitStart := time.Now(), time.Time{}
			b, err := t.Process(bctx, trecs, rn.sem)
			if err == nil && !b.Empty() {
				phaseMu.Lock()
				if abandoned {
					phaseMu.Unlock()
					return // discarded; the result is nobody's
				}
				committing[n] = true
				phaseMu.Unlock()
				commitStart = time.Now()
				err = t.Commit(bctx, b)
			}
			rn.r.cfg.Metrics.TaskBatch(n, trecs, b, began, commitStart, err)
			results <- result{t, b, err}
		}()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	reported := make(map[int32]bool, len(byTask))
	var (
		timedOut []int32
		got      []result
	)
	take := func(res result) {
		n := res.t.Partition()
		reported[n] = true
		phaseMu.Lock()
		inCommit := committing[n]
		phaseMu.Unlock()
		if !inCommit && res.err != nil && bctx.Err() != nil && errors.Is(res.err, context.DeadlineExceeded) {
			timedOut = append(timedOut, n) // the transform honored the deadline
			return
		}
		got = append(got, res)
	}
	for len(reported) < len(byTask) {
		select {
		case res := <-results:
			take(res)
			continue
		case <-timer.C:
		}
		// A transform that ignores ctx would hold the batch lock (and
		// so every rebalance) forever: stop waiting for the tasks still
		// in Process. Their goroutines are abandoned: they never reach
		// Commit, and find their tasks closed by the teardown that
		// follows. See BatchTimeout.
		phaseMu.Lock()
		abandoned = true
		var wait []int32
		for n := range byTask {
			switch {
			case reported[n]:
			case committing[n]:
				wait = append(wait, n)
			default:
				timedOut = append(timedOut, n)
			}
		}
		phaseMu.Unlock()
		for !allReported(reported, wait) {
			res := <-results
			if n := res.t.Partition(); slices.Contains(wait, n) {
				take(res)
			}
		}
		break
	}
	if len(timedOut) > 0 {
		rn.r.cfg.Metrics.TimedOut(timedOut)
		slices.Sort(timedOut)
		first := map[int32]map[string]int64{}
		for _, n := range timedOut {
			first[n] = map[string]int64{}
			for _, rec := range byTask[n] {
				if o, ok := first[n][rec.Topic]; !ok || rec.Offset < o {
					first[n][rec.Topic] = rec.Offset
				}
			}
		}
		// Errors of the other tasks are reported too; no offset is
		// committed outside a transaction: Run ends here.
		var errs []error
		for _, res := range got {
			if res.err != nil {
				errs = append(errs, res.err)
			}
		}
		return errors.Join(&BatchTimeoutError{Partitions: timedOut, Timeout: c.BatchTimeout, FirstOffsets: first}, errors.Join(errs...))
	}

	var (
		errs  []error
		empty = map[string]map[int32]kgo.EpochOffset{}
	)
	for _, res := range got {
		if res.err != nil {
			errs = append(errs, res.err)
			continue
		}
		if res.b.Empty() {
			for topic, off := range res.b.Offsets {
				if empty[topic] == nil {
					empty[topic] = map[int32]kgo.EpochOffset{}
				}
				empty[topic][res.t.Partition()] = kgo.EpochOffset{Epoch: -1, Offset: off}
			}
		}
	}
	if len(empty) > 0 {
		// Batches that wrote nothing open no transaction (the client
		// would never end an offsets-only one); the group member
		// commits their offsets, checked against its generation. No
		// transaction of these tasks is open now, and their earlier
		// transactional commits were appended before this one.
		if err := rn.commitDirect(bctx, empty); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

func allReported(reported map[int32]bool, ns []int32) bool {
	for _, n := range ns {
		if !reported[n] {
			return false
		}
	}
	return true
}
