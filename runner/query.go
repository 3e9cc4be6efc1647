package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// ErrNotOwner is matched (errors.Is) by a *NotOwnerError.
var ErrNotOwner = errors.New("runner: partition not owned by this instance")

// ErrNotQueryable is returned by Get and Range when there is no state to
// read: Run is not running, or the transformer is stateless or an
// extractor.
var ErrNotQueryable = errors.New("runner: no state to query")

// ErrNoSuchStore is returned by the store queries (GetStore, ScanStore)
// for a store name the transformer does not keep.
var ErrNoSuchStore = errors.New("runner: no such store")

// NotOwnerError is returned by Get and Range for a partition whose task
// this instance does not run (or not yet: it may be restoring). It names
// the owner when the group knows one; Addr is the owner's advertised
// address (see AdvertisedAddress), empty when it advertises none.
type NotOwnerError struct {
	Application string
	Partition   int32
	// Member is the group member id of the owner, empty when no member
	// holds the partition (a rebalance is in progress) or the group could
	// not be described.
	Member   string
	ClientID string
	Addr     string
	// Self reports that this instance holds the partition but its task is
	// still restoring.
	Self bool
	// Err is why the owner is unknown (describing the group failed).
	Err error
}

func (e *NotOwnerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "runner: partition %d of application %s is not served by this instance", e.Partition, e.Application)
	switch {
	case e.Self:
		b.WriteString(": its task is still restoring here")
	case e.Addr != "":
		fmt.Fprintf(&b, "; owner: %s (member %s)", e.Addr, e.Member)
	case e.Member != "":
		fmt.Fprintf(&b, "; owner: member %s (client id %q), which advertises no address", e.Member, e.ClientID)
	case e.Err != nil:
		fmt.Fprintf(&b, "; owner unknown: %v", e.Err)
	default:
		b.WriteString("; no instance owns it now (a rebalance is in progress?)")
	}
	return b.String()
}

func (e *NotOwnerError) Unwrap() error { return e.Err }

// Is matches ErrNotOwner.
func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// Get returns the committed state of key in the store of task partition
// (the input partition number the key's records go to), as the changelog
// holds it: never a write of a transaction that has not committed.
// Values are the encoded state (the transformer's codec). A partition
// whose task this instance does not run gives a *NotOwnerError
// (errors.Is(err, ErrNotOwner)) naming the owner when one is known. Safe
// for concurrent use while Run runs; ctx bounds the owner lookup.
func (r *Runner) Get(ctx context.Context, partition int32, key []byte) (value []byte, found bool, err error) {
	return r.GetStore(ctx, "", partition, key)
}

// Range calls fn for every key of the committed state of task partition,
// in key order, until fn returns false; the slices are valid only during
// the call. Errors as Get. The task's store cannot close while Range
// runs: a rebalance waits for it, so keep fn quick.
func (r *Runner) Range(ctx context.Context, partition int32, fn func(key, value []byte) bool) error {
	return r.ScanStore(ctx, "", partition, nil, nil, fn)
}

// GetStore is Get for the store name of task partition: a named store of
// the transformer (transformer.NewStore), its values encoded by the
// store's codec; "" for the default store (Get); "timers" for the timer
// store of a transformer with timers or a state TTL (keys
// store.TimerKey, values store.TimerValue, and the stream time under
// store.StreamTimeKey). A name the transformer does not keep gives
// ErrNoSuchStore; other errors as Get.
func (r *Runner) GetStore(ctx context.Context, name string, partition int32, key []byte) (value []byte, found bool, err error) {
	err = r.withStore(ctx, name, partition, func(st *store.Store) error {
		value, found, err = st.Get(key)
		return err
	})
	return value, found, err
}

// ScanStore calls fn for the keys k of the committed state of store name
// (as GetStore) of task partition with lo <= k < hi (hi nil: no upper
// bound), in key order, until fn returns false; the slices are valid only
// during the call. Errors as GetStore. The store cannot close while
// ScanStore runs: a rebalance waits for it, so keep fn quick.
func (r *Runner) ScanStore(ctx context.Context, name string, partition int32, lo, hi []byte, fn func(key, value []byte) bool) error {
	return r.withStore(ctx, name, partition, func(st *store.Store) error {
		return st.Scan(lo, hi, func(k, v []byte) (bool, error) { return fn(k, v), nil })
	})
}

// StoreNames returns the names of the stores the transformer keeps per
// task besides the default one: its named stores in their declared order,
// then "timers" when it sets timers. Empty for other stages.
func (r *Runner) StoreNames() []string {
	ps, ok := r.proc.(process.Stores)
	if !ok {
		return nil
	}
	var names []string
	for _, s := range ps.Stores() {
		names = append(names, s.Name)
	}
	if ps.Timers() {
		names = append(names, changelog.TimersName)
	}
	return names
}

// namedStores is implemented by the engine's query handle
// (transform.Query) for the named stores of its tasks: it calls fn with
// store name of running task n and reports true, or reports false when
// task n does not run here; the store cannot close while fn runs.
type namedStores interface {
	ReadNamedStore(n int32, name string, fn func(*store.Store) error) (bool, error)
}

// storeEngine is what withStore reads stores through: a running engine's
// query handle.
type storeEngine interface {
	ReadStore(n int32, fn func(*store.Store) error) (bool, error)
}

func (r *Runner) withStore(ctx context.Context, name string, partition int32, fn func(*store.Store) error) error {
	var q storeEngine
	if qq := r.ops.query(); qq != nil {
		q = qq
	}
	ok, err := r.readStore(q, name, partition, fn)
	if err != nil || ok {
		return err
	}
	return r.notOwner(ctx, partition)
}

// readStore calls fn with store name of task partition through q (nil:
// Run is not running) and reports whether the task runs here.
func (r *Runner) readStore(q storeEngine, name string, partition int32, fn func(*store.Store) error) (bool, error) {
	if name == "" {
		if r.proc == nil || !r.proc.Stateful() {
			return false, fmt.Errorf("%w: application %s runs no stateful transformer", ErrNotQueryable, r.cfg.ApplicationID)
		}
	} else if !slices.Contains(r.StoreNames(), name) {
		return false, fmt.Errorf("%w: application %s keeps no store %q (its stores: %q)", ErrNoSuchStore, r.cfg.ApplicationID, name, r.StoreNames())
	}
	if q == nil {
		return false, nil
	}
	var ok bool
	var err error
	if name == "" {
		ok, err = q.ReadStore(partition, fn)
	} else {
		nq, can := q.(namedStores)
		if !can {
			return false, fmt.Errorf("%w: this runner's engine does not serve named stores (store %q)", ErrNotQueryable, name)
		}
		ok, err = nq.ReadNamedStore(partition, name, fn)
	}
	if err != nil {
		what := "the store"
		if name != "" {
			what = fmt.Sprintf("store %q", name)
		}
		return false, fmt.Errorf("runner: reading %s of partition %d: %w", what, partition, err)
	}
	return ok, nil
}

// notOwner describes the group to name the owner of partition.
func (r *Runner) notOwner(ctx context.Context, partition int32) error {
	o := &r.ops
	q := o.query()
	if q == nil {
		return fmt.Errorf("%w: Run is not running (state %s)", ErrNotQueryable, o.stateNow())
	}
	e := &NotOwnerError{Application: r.cfg.ApplicationID, Partition: partition}
	groups, err := q.Admin().DescribeGroups(ctx, r.cfg.Group())
	if err == nil {
		err = groups.Error()
	}
	if err != nil {
		e.Err = err
		return e
	}
	self := q.MemberID()
	for _, g := range groups {
		for _, m := range g.Members {
			ca, ok := m.Assigned.AsConsumer()
			if !ok {
				continue
			}
			for _, t := range ca.Topics {
				if t.Topic != r.cfg.InputTopics[0] {
					continue
				}
				for _, p := range t.Partitions {
					if p != partition {
						continue
					}
					if self == m.MemberID {
						e.Self = true
						return e
					}
					e.Member, e.ClientID = m.MemberID, m.ClientID
					e.Addr, _ = strings.CutPrefix(m.ClientID, advertisePrefix)
					if !strings.HasPrefix(m.ClientID, advertisePrefix) {
						e.Addr = ""
					}
					return e
				}
			}
		}
	}
	return e
}

func (o *ops) stateNow() State {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.state
}

// query returns the running transformer engine, nil when none runs.
func (o *ops) query() *transform.Query {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.q
}
