package runner

// Stats are counts of a Runner since New.
type Stats struct {
	// InvalidSkipped, InvalidSubstituted and InvalidDeadLettered count
	// the invalid records handled by the InvalidRecords policy, counted
	// when their batch was processed, before it commits: a batch that
	// then fails to commit ends Run, but one dropped by a rebalance is
	// counted again by the instance that replays it.
	InvalidSkipped      int64
	InvalidSubstituted  int64
	InvalidDeadLettered int64
}

// Stats returns the runner's counts. It is safe for concurrent use, also
// while Run runs.
func (r *Runner) Stats() Stats {
	if r.policy == nil {
		return Stats{}
	}
	return Stats{
		InvalidSkipped:      r.policy.Skipped.Load(),
		InvalidSubstituted:  r.policy.Substituted.Load(),
		InvalidDeadLettered: r.policy.DeadLettered.Load(),
	}
}
