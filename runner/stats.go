package runner

// Stats are counts of a Runner since it was built.
type Stats struct {
	// InvalidSkipped, InvalidSubstituted and InvalidDeadLettered count
	// the invalid records handled by the InvalidRecords policy, counted
	// when their batch was processed, before it commits: a batch that
	// then fails to commit ends Run, but one dropped by a rebalance is
	// counted again by the instance that replays it.
	InvalidSkipped      int64
	InvalidSubstituted  int64
	InvalidDeadLettered int64
	// TaskRestarts counts the tasks closed dirty after a transient broker
	// error of their transaction and re-initialized in place (fenced,
	// restored, re-positioned at the committed offsets) without ending
	// Run; each is logged at warn with its cause. See TaskTimeout.
	TaskRestarts int64
}

// Stats returns the runner's counts. It is safe for concurrent use, also
// while Run runs.
func (r *Runner) Stats() Stats {
	s := Stats{TaskRestarts: r.ops.restarts.Load()}
	if r.policy != nil {
		s.InvalidSkipped = r.policy.Skipped.Load()
		s.InvalidSubstituted = r.policy.Substituted.Load()
		s.InvalidDeadLettered = r.policy.DeadLettered.Load()
	}
	return s
}
