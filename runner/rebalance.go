package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/group"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/task"
)

// initPending restores every pending task and resumes its partitions. A
// revocation cuts a restore short; the revocation then tears it down.
func (rn *run) initPending(ctx context.Context) error {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	ns := make([]int32, 0, len(rn.pending))
	for n := range rn.pending {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	// Resume the restored tasks' partitions together, once all restores
	// ended (no batch runs before that anyway: this holds the batch lock).
	// Resumed one by one, the first would start a fetch that long-polls
	// (FetchMaxWait, 5s by default) on partitions without new records,
	// and the partitions resumed after it would wait for that fetch.
	var ready []int32
	defer rn.r.ops.tasks(rn.tasks, rn.pending)
	defer func() {
		if len(ready) > 0 {
			rn.consumer.ResumeFetchPartitions(rn.topicPartitions(ready...))
		}
	}()
	for _, n := range ns {
		t := rn.pending[n]
		rn.rmu.Lock()
		if rn.revoking {
			rn.rmu.Unlock()
			return nil
		}
		rctx, cancel := context.WithCancel(ctx)
		rn.cancelRestore = cancel
		rn.rmu.Unlock()
		rctx = rn.r.ops.restoreContext(rctx, n)
		err := t.Restore(rctx, rn.adm)

		rn.rmu.Lock()
		rn.cancelRestore = nil
		revoked := rn.revoking
		rn.rmu.Unlock()
		cancel()
		if err != nil {
			if revoked || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("runner: %w", err)
		}
		delete(rn.pending, n)
		rn.tasks[n] = t
		rn.workers[n] = rn.startWorker(t)
		ready = append(ready, n)
		rn.r.cfg.Logger.Info("task running", "partition", n)
	}
	return nil
}

func (rn *run) topicPartitions(ns ...int32) map[string][]int32 {
	m := make(map[string][]int32, len(rn.r.cfg.InputTopics))
	for _, t := range rn.r.cfg.InputTopics {
		m[t] = slices.Clone(ns)
	}
	return m
}

// onAssigned pauses the new partitions and fences their tasks' previous
// owners. The fence runs here, before the client fetches the group's
// committed offsets (require-stable), so those offsets are final. Restores
// run in the main loop.
func (rn *run) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	c := &rn.r.cfg
	rn.r.ops.rebalance(true)
	cl.PauseFetchPartitions(assigned)

	held := group.Held(assigned)
	var ns []int32
	for n, k := range held {
		if n >= rn.partitions {
			rn.setFatal(flechtwerk.Errorf(flechtwerk.CodePartitionMismatch, "topic "+strings.Join(c.InputTopics, ","),
				"assigned partition %d, but the input topics had %d partitions at startup and the changelog has as many; adding partitions to inputs needs a state migration", n, rn.partitions))
			return
		}
		if k != len(c.InputTopics) {
			rn.setFatal(fmt.Errorf("runner: partition %d assigned for %d of %d input topics; the group must use range assignment over co-partitioned inputs (is another application using group %q?)", n, k, len(c.InputTopics), c.ApplicationID))
			return
		}
		ns = append(ns, n)
	}
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

	type started struct {
		n   int32
		t   *task.Task
		err error
	}
	out := make(chan started, len(ns))
	for _, n := range ns {
		go func() {
			t, err := task.Start(ctx, task.Config{
				ApplicationID:      c.ApplicationID,
				Partition:          n,
				InputTopics:        c.InputTopics,
				TopicIDs:           rn.topicIDs,
				Changelog:          rn.changelog,
				StateDir:           c.StateDir,
				TransactionTimeout: c.TransactionTimeout,
				KafkaOpts:          rn.base,
				Logger:             c.Logger,
			}, rn.r.proc)
			out <- started{n, t, err}
		}()
	}
	var errs []error
	rn.mu.Lock()
	for range ns {
		s := <-out
		if s.err != nil {
			errs = append(errs, s.err)
			continue
		}
		if old := rn.pending[s.n]; old != nil {
			old.Close()
		}
		rn.pending[s.n] = s.t
	}
	rn.r.ops.tasks(rn.tasks, rn.pending)
	rn.mu.Unlock()
	if len(errs) > 0 {
		if ctx.Err() != nil {
			return // the client is closing (Run is stopping): not a failure
		}
		rn.setFatal(fmt.Errorf("runner: starting tasks: %w", errors.Join(errs...)))
		return
	}
	c.Logger.Info("partitions assigned", "partitions", ns)
	rn.syncStandbys()
	rn.poke()
}

// onRevoked tears every task down after it committed what it processed
// (the main loop never holds a poll's records while it runs: rebalances are
// blocked until they are handed out), and after cutting a restore short.
func (rn *run) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	rn.r.ops.rebalance(false)
	rn.rmu.Lock()
	rn.revoking = true
	if rn.cancelRestore != nil {
		rn.cancelRestore()
	}
	rn.rmu.Unlock()

	rn.teardown()
	rn.syncStandbys() // a task revoked here may be a standby of this instance now

	rn.rmu.Lock()
	rn.revoking = false
	rn.rmu.Unlock()
	rn.r.cfg.Logger.Info("partitions revoked", "revoked", revoked)
}

// teardown stops every worker and waits for it: unless Run is failing, each
// commits what its task processed (its queued records are dropped; their
// offsets were never committed). Then it closes every task, aborting what
// is still open. A worker's wait is bounded: a chunk by BatchTimeout (a
// stuck transform is abandoned), a commit by BatchTimeout and its abort.
func (rn *run) teardown() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	for _, w := range rn.workers {
		w.requestStop()
	}
	for n, w := range rn.workers {
		<-w.done
		delete(rn.workers, n)
	}
	rn.r.ops.tasks(nil, nil) // before any store closes: waits for running queries
	var errs []error
	for n, t := range rn.tasks {
		errs = append(errs, t.Close())
		delete(rn.tasks, n)
	}
	for n, t := range rn.pending {
		errs = append(errs, t.Close())
		delete(rn.pending, n)
	}
	if err := errors.Join(errs...); err != nil {
		rn.setFatal(fmt.Errorf("runner: closing tasks: %w", err))
	}
}
