package runner

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/metrics"
	"github.com/flechtwerk/flechtwerk/task"
)

// Metrics registers the metrics of the catalog (package metrics) on reg,
// each with the constant label application_id. Default: none, and nothing
// is registered anywhere. The constructor reports a registration error (e.g. two
// runners of one application on one registry) as
// flechtwerk.CodeInvalidOption.
func Metrics(reg prometheus.Registerer) Opt {
	return anyOpt{setter: func(c *config.Options) { c.Registerer = reg }}
}

// AdvertisedAddress sets the address (host:port) at which this instance
// serves interactive queries (the user's own server over Runner.Get). It
// is carried in the client id of the group member, "flechtwerk@" + addr,
// so that Get on another instance can name this one as a key's owner (in
// a *NotOwnerError); it replaces a client id set with WithKafkaOpts for the
// group member only. Default: none advertised.
func AdvertisedAddress(addr string) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.Advertise = addr }}
}

// advertisePrefix starts the client id of a member that advertises an
// address.
const advertisePrefix = "flechtwerk@"

// State is the state of a Runner.
type State int

// The states of a Runner, in the order of a Run.
const (
	// NotStarted: Run was not called yet.
	NotStarted State = iota
	// Starting: Run checks topics and joins the group.
	Starting
	// Restoring: a task restores its store from the changelog.
	Restoring
	// Running: every task of the instance is restored and fetching (a
	// sink: its checks passed and it fetches; an extractor: its stage is
	// open; a bridge: its first reconciliation subscribed).
	Running
	// Rebalancing: the group moves tasks; the tasks that stay on this
	// instance keep processing.
	Rebalancing
	// Stopping: Run's ctx was canceled; Run finishes the batch and leaves.
	Stopping
	// Stopped: Run returned nil.
	Stopped
	// Failed: Run returned an error (Runner.State returns it).
	Failed
)

var stateNames = []string{"not_started", "starting", "restoring", "running", "rebalancing", "stopping", "stopped", "failed"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

// State returns the runner's state and, when it is Failed, the error Run
// returned. Safe for concurrent use.
func (r *Runner) State() (State, error) {
	r.ops.mu.Lock()
	defer r.ops.mu.Unlock()
	return r.ops.state, r.ops.err
}

// Healthy reports nil while Run is alive, else why not: Run not called,
// or ended (with its error), or, for a transformer, its main loop (the
// one that polls and hands records to the tasks) did not come round for
// longer than LivenessBound. For liveness probes; see metrics.Handler.
func (r *Runner) Healthy() error {
	switch s, err := r.State(); s {
	case NotStarted:
		return fmt.Errorf("runner: not started")
	case Stopped:
		return fmt.Errorf("runner: stopped")
	case Failed:
		return fmt.Errorf("runner: failed: %w", err)
	}
	if at := r.ops.beat.Load(); at != 0 {
		if d := time.Since(time.Unix(0, at)); d > r.LivenessBound() {
			return fmt.Errorf("runner: the main loop has not come round for %s (bound %s)", d.Round(time.Second), r.LivenessBound())
		}
	}
	return nil
}

// LivenessBound is how long the main loop of a transformer may go without
// coming round before Healthy fails: 2*BatchTimeout + 1 minute (2 minutes
// by default). The loop comes round at least every few seconds, records
// or not; it waits for the tasks only in a rebalance: for the commit of a
// revoked task (bounded by BatchTimeout) or its fence in flight.
func (r *Runner) LivenessBound() time.Duration { return 2*r.cfg.BatchTimeout + time.Minute }

// Ready reports nil while this instance can serve its tasks: once its
// first assignment is restored and fetching (an extractor: once Run
// started) and until Run stops or fails. A rebalance does not make it
// unready, nor the restore of a task that moves here later: cooperative
// rebalancing keeps the tasks that stay running. For readiness probes.
func (r *Runner) Ready() error {
	r.ops.mu.Lock()
	s, served := r.ops.state, r.ops.served
	r.ops.mu.Unlock()
	switch s {
	case Restoring, Running, Rebalancing:
		if served {
			return nil
		}
		return fmt.Errorf("runner: not ready: %s its first assignment", s)
	}
	return fmt.Errorf("runner: not ready: %s", s)
}

// Handler returns the http.Handler of metrics.Handler for this runner:
// /healthz, /readyz and /metrics (from g, usually the registry given to
// Metrics; nil serves no /metrics).
func (r *Runner) Handler(g prometheus.Gatherer) http.Handler { return metrics.Handler(r, g) }

// ops is the operational state of a Runner: its State, and the engine's
// view that queries read. It is the transformer engine's transform.Ops.
type ops struct {
	m   *imetrics.Recorder
	cfg *config.Options

	mu        sync.Mutex
	state     State
	err       error
	rebalAt   time.Time // start of the rebalance in progress
	assigned  bool      // an assignment arrived since it started
	served    bool      // the first assignment was restored and fetching
	restoring map[int32]time.Time
	// q is the running transformer engine; nil while none runs.
	q *transform.Query
	// starts counts, per task, the times this Runner started (fenced)
	// it.
	starts map[int32]int
	// restarts counts the tasks re-initialized after a transient error.
	restarts atomic.Int64
	// beat is when the main loop last came round (UnixNano; 0: no loop
	// runs, or not a transformer).
	beat atomic.Int64
}

var _ transform.Ops = (*ops)(nil)

// initOps builds the metrics recorder (the constructors call it after the options).
func (r *Runner) initOps() error {
	r.ops.cfg = &r.cfg
	m, err := imetrics.New(r.cfg.Registerer, r.cfg.ApplicationID)
	if err != nil {
		return flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Metrics", "registering the metrics: %v", err)
	}
	r.cfg.Metrics, r.ops.m = m, m
	r.ops.set(NotStarted, nil)
	return nil
}

func (o *ops) setLocked(s State, err error) {
	o.state, o.err = s, err
	o.m.State(stateNames[s], stateNames[1:])
}

func (o *ops) set(s State, err error) {
	o.mu.Lock()
	o.setLocked(s, err)
	o.mu.Unlock()
}

// begin marks Run started (Starting); the returned function marks it
// ended with *errp.
func (o *ops) begin(ctx context.Context) func(errp *error) {
	o.set(Starting, nil)
	stop := context.AfterFunc(ctx, func() {
		o.mu.Lock()
		if o.state < Stopping {
			o.setLocked(Stopping, nil)
		}
		o.mu.Unlock()
	})
	return func(errp *error) {
		stop()
		o.beat.Store(0)
		if *errp != nil {
			o.set(Failed, *errp)
		} else {
			o.set(Stopped, nil)
		}
	}
}

// serve marks a stage that is ready once it started (an extractor once
// open, a sink once its checks passed, a bridge once reconciled) Running
// and served, unless Run is already stopping.
func (o *ops) serve() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state < Stopping {
		o.setLocked(Running, nil)
		o.served = true
	}
}

// Tick records that the main loop came round.
func (o *ops) Tick() { o.beat.Store(time.Now().UnixNano()) }

// clientID is the client id of the group member: the advertised address,
// empty when none is advertised.
func (o *ops) clientID() string {
	if o.cfg.Advertise == "" {
		return ""
	}
	return advertisePrefix + o.cfg.Advertise
}

// Attach makes q the engine that queries use; the returned function
// detaches it.
func (o *ops) Attach(q transform.Query) func() {
	o.mu.Lock()
	o.q = &q
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		o.q = nil
		o.mu.Unlock()
	}
}

// Rebalance marks a rebalance in progress: an assignment (assigned) or a
// revocation.
func (o *ops) Rebalance(assigned bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.rebalAt.IsZero() {
		o.rebalAt = time.Now()
		o.m.Rebalanced()
	}
	o.assigned = assigned
	if o.state < Stopping {
		o.setLocked(Rebalancing, nil)
	}
}

// Started records that task n was started (its producer fenced the
// previous owner).
func (o *ops) Started(n int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.starts == nil {
		o.starts = map[int32]int{}
	}
	o.starts[n]++
}

// Restarted counts a task re-initialized after a transient error.
func (o *ops) Restarted(int32) { o.restarts.Add(1) }

// taskStarts returns, per task, how often this Runner started it.
func (o *ops) taskStarts() map[int32]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.starts)
}

// Tasks records the running and pending tasks, and the number of tasks
// still starting (fencing, not pending yet): the restores that ended, and
// the State. The engine holds its batch lock.
func (o *ops) Tasks(running, pending map[int32]*task.Task, starting int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for n, began := range o.restoring {
		if running[n] != nil {
			o.m.Restored(n, time.Since(began))
			delete(o.restoring, n)
		} else if pending[n] == nil {
			delete(o.restoring, n)
		}
	}
	if o.state >= Stopping || o.state == Running {
		return
	}
	switch {
	case len(pending) > 0 || starting > 0:
		o.setLocked(Restoring, nil)
	case o.assigned:
		o.setLocked(Running, nil)
		o.served = true
		if !o.rebalAt.IsZero() {
			o.m.RebalanceDone(time.Since(o.rebalAt))
			o.rebalAt = time.Time{}
		}
	}
}

// restoreLogEvery is how often a restore logs its progress.
const restoreLogEvery = 5 * time.Second

// RestoreContext makes the restore of task n report its progress: to the
// metrics, and to the log every restoreLogEvery.
func (o *ops) RestoreContext(ctx context.Context, n int32) context.Context {
	o.mu.Lock()
	if o.restoring == nil {
		o.restoring = map[int32]time.Time{}
	}
	o.restoring[n] = time.Now()
	o.mu.Unlock()
	logged := time.Now()
	return changelog.WithProgress(ctx, func(p changelog.Progress) {
		o.m.Restoring(n, p.Next-p.Start, p.End-p.Start, p.Applied)
		if time.Since(logged) < restoreLogEvery {
			return
		}
		logged = time.Now()
		took := time.Since(p.Began)
		done, left := p.Next-p.Start, p.End-p.Next
		rate := float64(done) / took.Seconds()
		var eta time.Duration
		if rate > 0 {
			eta = time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second)
		}
		o.cfg.Logger.Info("restoring", "partition", n, "changelog", p.Topic,
			"offsets_done", done, "offsets_total", p.End-p.Start, "records", p.Records,
			"rate_per_s", int64(rate), "eta", eta)
	})
}
