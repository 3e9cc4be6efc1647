package transform

import (
	"context"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/flechtwerk/flechtwerk/internal/group"
	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task"
)

// Ops is what the engine reports to its runner, for the runner's State,
// readiness and queries. Its methods are called from the engine's
// goroutines (the main loop, group callbacks, restores) and must not block.
type Ops interface {
	// Attach is called once the group member exists: until the returned
	// detach is called, q answers queries. Detach is called before Run
	// returns.
	Attach(q Query) (detach func())
	// Tick: the main loop came round.
	Tick()
	// Rebalance: a rebalance began, an assignment (assigned) or a
	// revocation.
	Rebalance(assigned bool)
	// RestoreContext returns the context the restore of task n runs
	// under (to report its progress; see changelog.WithProgress).
	RestoreContext(ctx context.Context, n int32) context.Context
	// Started: task n was started; its producer fenced the previous
	// owner.
	Started(n int32)
	// Restarted: task n was re-initialized after a transient error.
	Restarted(n int32)
	// Tasks: the running and pending tasks, and the number still
	// starting (fencing, not pending yet), after each change. The caller
	// holds the engine's batch lock: the maps must not be kept.
	Tasks(running, pending map[int32]*task.Task, starting int)
}

// Hooks are knobs of tests and benchmarks of the runner; the zero value
// is production.
type Hooks struct {
	// Committed, when set, is called after each commit of task n (a
	// transaction or an offsets-only commit).
	Committed func(n int32)
	// Eager makes the group use kgo's eager range balancer, which every
	// rebalance revokes every task with (and which hands out no standby
	// tasks): a baseline for benchmarks.
	Eager bool
}

// Query is a running engine as its runner's queries see it. Its methods
// are safe for concurrent use while Run runs.
type Query struct{ rn *run }

// Admin returns the admin client of the run.
func (q Query) Admin() *kadm.Client { return q.rn.adm }

// MemberID returns the member ID of the run's group member, empty while it
// has none.
func (q Query) MemberID() string {
	id, _ := q.rn.consumer.GroupMetadata()
	return id
}

// ReadStore calls fn with the store of running task n and reports true, or
// reports false when task n does not run here (or is stateless). The
// store cannot close while fn runs.
func (q Query) ReadStore(n int32, fn func(*store.Store) error) (bool, error) {
	q.rn.qmu.RLock()
	defer q.rn.qmu.RUnlock()
	st := q.rn.stores[n]
	if st == nil {
		return false, nil
	}
	return true, fn(st)
}

// ReadNamedStore calls fn with the store of the named store name (or
// the timer store, task.TimersStore) of running task n and reports true,
// or reports false when task n does not run here or has no such store.
// The store cannot close while fn runs.
func (q Query) ReadNamedStore(n int32, name string, fn func(*store.Store) error) (bool, error) {
	q.rn.qmu.RLock()
	defer q.rn.qmu.RUnlock()
	st := q.rn.named[n][name]
	if st == nil {
		return false, nil
	}
	return true, fn(st)
}

// StoreNames returns the names of the named stores of the running
// transformer, in its order (task.TimersStore last when it sets timers);
// none for a transformer without named stores.
func (q Query) StoreNames() []string { return q.rn.storeNames() }

// Stores returns the partitions of the queryable stores.
func (q Query) Stores() []int32 {
	q.rn.qmu.RLock()
	defer q.rn.qmu.RUnlock()
	out := make([]int32, 0, len(q.rn.stores))
	for n := range q.rn.stores {
		out = append(out, n)
	}
	return out
}

// source is the scrape-time metrics source of a run.
type source struct{ rn *run }

// Lag returns the lag of every partition of the input topics, whichever
// instance runs it: lag stays visible while any instance lives.
func (s source) Lag(ctx context.Context) (map[imetrics.TP]int64, error) {
	return group.Lag(ctx, s.rn.adm, s.rn.c.Group(), s.rn.c.InputTopics)
}

func (s source) Stores(fn func(int32, *store.Store)) {
	s.rn.qmu.RLock()
	defer s.rn.qmu.RUnlock()
	for n, st := range s.rn.stores {
		if st != nil {
			fn(n, st)
		}
	}
}

func (source) Configs() (int, func([]byte) bool) { return 0, nil }

func (s source) StandbyLag(ctx context.Context) (map[int32]int64, error) {
	return s.rn.standbyLag(ctx)
}
