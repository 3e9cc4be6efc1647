package transform

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Describe describes the tasks of the run (running, pending, starting or
// restoring, waiting for their re-seek), the tasks that failed and wait
// for their re-initialization, its standby replicas and the changelog
// offsets of the stores it holds: a diagnosis for a wait that timed out. A
// part whose lock stays held is reported as such (it may be where the run
// is stuck) instead of blocking the caller for more than a few seconds.
func (q Query) Describe() string {
	rn := q.rn
	var b strings.Builder
	b.WriteString(within(5*time.Second, "the batch lock (run.mu)", func() string {
		rn.mu.Lock()
		defer rn.mu.Unlock()
		var restores []string
		for _, n := range slices.Sorted(maps.Keys(rn.restores)) {
			kind := "restore"
			if rn.restores[n].fence {
				kind = "start (fence)"
			}
			restores = append(restores, fmt.Sprintf("%d:%s", n, kind))
		}
		return fmt.Sprintf("tasks running %v, pending %v, starting or restoring %v, restarting %v, re-seeks queued %v, workers %v\n",
			slices.Sorted(maps.Keys(rn.tasks)), slices.Sorted(maps.Keys(rn.pending)), restores,
			slices.Sorted(maps.Keys(rn.restarting)), slices.Sorted(maps.Keys(rn.seeks)), slices.Sorted(maps.Keys(rn.workers)))
	}))
	b.WriteString(within(5*time.Second, "the recovery lock (run.fmu)", func() string {
		rn.fmu.Lock()
		defer rn.fmu.Unlock()
		var fs []string
		for _, n := range slices.Sorted(maps.Keys(rn.failing)) {
			f := rn.failing[n]
			fs = append(fs, fmt.Sprintf("task %d: failing for %v, %d re-initializations, queued %v, next in %v: %v",
				n, time.Since(f.since).Round(time.Millisecond), f.tries, f.queued, time.Until(f.next).Round(time.Millisecond), f.cause))
		}
		lost := "never"
		if !rn.groupLostAt.IsZero() {
			lost = time.Since(rn.groupLostAt).Round(time.Millisecond).String() + " ago"
		}
		return fmt.Sprintf("failing tasks %d %v; group session lost without an assignment since: %s\n", len(fs), fs, lost)
	}))
	if rn.standby.mgr != nil {
		b.WriteString(within(5*time.Second, "the standby locks", func() string {
			rn.standby.mu.Lock()
			held := slices.Clone(rn.standby.held)
			rn.standby.mu.Unlock()
			return fmt.Sprintf("standby tasks set %v, held by the manager %v, their checkpoints %v\n",
				held, rn.standby.mgr.Tasks(), rn.standby.mgr.Offsets())
		}))
	}
	b.WriteString(within(5*time.Second, "the store locks", func() string {
		return fmt.Sprintf("changelog offsets of the stores held (reported to the balancer) %v\n", rn.changelogOffsets())
	}))
	return b.String()
}

// Standbys returns the changelog offsets of the stores the run holds (as
// reported to the balancer) and its standby tasks; nil, nil when it keeps
// no standby replicas.
func (q Query) Standbys() (map[int32]int64, []int32) {
	if q.rn.standby.mgr == nil {
		return nil, nil
	}
	return q.rn.changelogOffsets(), q.rn.standby.mgr.Tasks()
}

// within runs fn, giving up after d (fn keeps running): what names the
// lock fn may block on.
func within(d time.Duration, what string, fn func() string) string {
	ch := make(chan string, 1)
	go func() { ch <- fn() }()
	select {
	case s := <-ch:
		return s
	case <-time.After(d):
		return fmt.Sprintf("(%s still held after %v)\n", what, d)
	}
}
