package transform

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/flechtwerk/flechtwerk/internal/standby"
	"github.com/flechtwerk/flechtwerk/task"
)

// standbyAssignment tells a member which tasks it keeps standby replicas
// of: the group's balancer decides it with the assignment and hands it to
// each member with its partitions.
type standbyAssignment interface {
	// Standbys returns this member's standby tasks of the current
	// generation; tasks the member runs among them are ignored.
	Standbys() []int32
}

// standbys is the standby side of a run: the replicas this instance keeps
// of tasks it does not run (see StandbyReplicas).
type standbys struct {
	mgr *standby.Manager // nil: no standby replicas
	src standbyAssignment

	mu   sync.Mutex // serializes sync
	held []int32    // the standby tasks last set
}

// startStandbys starts the standby manager when StandbyReplicas asks for
// replicas; src is where the member learns its standby tasks.
func (rn *run) startStandbys(src standbyAssignment) error {
	c := rn.c
	if c.StandbyReplicas == 0 || !task.KeepsState(rn.proc) {
		return nil
	}
	var stores []standby.Store
	for _, s := range rn.storeSpecs {
		stores = append(stores, standby.Store{Name: s.name, Topic: s.topic, Timers: s.timers})
	}
	if src == nil {
		c.Logger.Warn("runner: StandbyReplicas is set, but the group's range balancer assigns no standby tasks: no standby replicas are kept",
			"standby_replicas", c.StandbyReplicas)
		return nil
	}
	def := rn.changelog
	if !rn.proc.Stateful() {
		def = "" // named stores or timers only
	}
	mgr, err := standby.New(standby.Config{
		ApplicationID:      c.ApplicationID,
		Changelog:          def,
		StateDir:           c.StateDir,
		Admin:              rn.adm,
		KafkaOpts:          rn.base,
		TransactionTimeout: c.TransactionTimeout,
		Stores:             stores,
		OnError:            func(err error) { rn.setFatal(fmt.Errorf("runner: %w", err)) },
		Logger:             c.Logger,
	})
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	rn.standby.mgr, rn.standby.src = mgr, src
	return nil
}

// releaseStandby stops this instance's standby of task n, if any, so that
// the task opens its store warm. Called before the task starts.
func (rn *run) releaseStandby(n int32) error {
	if rn.standby.mgr == nil {
		return nil
	}
	if err := rn.standby.mgr.Release(n); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

// syncStandbys sets the standby tasks to what the assignment says, less
// the tasks this instance runs (their stores are the tasks'). Called from
// the group callbacks, after the tasks changed.
func (rn *run) syncStandbys() {
	s := &rn.standby
	if s.mgr == nil || s.src == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rn.mu.Lock()
	var want []int32
	for _, n := range s.src.Standbys() {
		if rn.tasks[n] == nil && rn.pending[n] == nil && n >= 0 && n < rn.partitions {
			want = append(want, n)
		}
	}
	rn.mu.Unlock()
	slices.Sort(want)
	want = slices.Compact(want)
	if slices.Equal(want, s.held) {
		return
	}
	if err := s.mgr.Set(want); err != nil {
		rn.setFatal(fmt.Errorf("runner: %w", err))
		return
	}
	s.held = want
	rn.c.Metrics.Standbys(len(want))
}

// closeStandbys stops every standby and closes their stores.
func (rn *run) closeStandbys() error {
	if rn.standby.mgr == nil {
		return nil
	}
	err := rn.standby.mgr.Close()
	rn.c.Metrics.Standbys(0)
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

// changelogOffsets returns, per task whose stores this instance holds
// open, the changelog offset the stores reflect (their checkpoints'
// offsets summed over the task's default, named and timer stores, as
// standby.Manager.Offsets; a task with a default store counts once that
// one has a checkpoint, one without once any has): the running tasks'
// and the standby replicas'. A member reports it to the group's
// balancer, which gives a task that must move to the member that is
// furthest ahead in it (the shortest restore). Safe to call from any
// goroutine while Run runs.
func (rn *run) changelogOffsets() map[int32]int64 {
	out := map[int32]int64{}
	if rn.standby.mgr != nil {
		maps.Copy(out, rn.standby.mgr.Offsets())
	}
	rn.qmu.RLock()
	for n, st := range rn.stores {
		var next int64
		held := false
		if st != nil {
			var ok bool
			if next, ok = st.Next(); !ok {
				continue
			}
			held = true
		}
		// Summed over the task's stores, as the standbys report theirs.
		for _, named := range rn.named[n] {
			if named == nil {
				continue
			}
			if o, ok := named.Next(); ok {
				next += o
				held = true
			}
		}
		if held {
			out[n] = next
		}
	}
	rn.qmu.RUnlock()
	return out
}

// standbyLag is the scrape-time lag of the standby replicas.
func (rn *run) standbyLag(ctx context.Context) (map[int32]int64, error) {
	if rn.standby.mgr == nil {
		return nil, nil
	}
	return rn.standby.mgr.Lag(ctx)
}
