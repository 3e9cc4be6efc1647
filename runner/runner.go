package runner

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/bridge"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/engine/extract"
	sinkengine "github.com/flechtwerk/flechtwerk/internal/engine/sink"
	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
	"github.com/flechtwerk/flechtwerk/internal/pollstage"
	"github.com/flechtwerk/flechtwerk/internal/sinkstage"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// Stage is what a Runner runs: a *transformer.Transformer, an
// *extractor.Extractor, a *sink.Stage or a *mqttbridge.Bridge. Other types
// are refused by New.
type Stage interface {
	// Validate reports a problem found when the stage was built.
	Validate() error
}

// Runner runs one transformer or extractor. Build it with New; Run it
// once.
type Runner struct {
	cfg     config.Options
	kind    config.Kind
	proc    stage.Transformer // a transformer
	ex      *extract.Engine   // an extractor
	policy  *batch.Policy     // a transformer's invalid-record policy
	snk     sinkstage.Sink    // a sink
	brs     bridge.Stage      // a bridge (package mqttbridge)
	br      *bridge.Engine
	started atomic.Bool
	ops     ops
}

// ErrRunTwice is returned by a second call of Run on the same Runner.
var ErrRunTwice = errors.New("runner: Run called twice; build a new Runner with New")

// New checks the stage and the configuration and returns a Runner. Every
// problem is reported at once as *flechtwerk.ConfigError values joined with
// errors.Join, an option of the other stage kind among them (e.g.
// InputTopics for an extractor); New does no I/O. Problems that need the
// cluster (missing topics, partition counts, the changelog) are reported by
// Run before anything is consumed or polled.
func New(s Stage, opts ...Opt) (*Runner, error) {
	r := &Runner{}
	var (
		errs     []error
		stateful = true
		x        pollstage.Extractor
	)
	if s != nil {
		x, _ = pollstage.ExtractorOf(s)
	}
	switch {
	case s == nil:
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "stage", "transformer or extractor is nil"))
	case x != nil:
		r.kind = config.Extractor
	case bridgeOf(s) != nil:
		r.kind, r.brs, stateful = config.Bridge, bridgeOf(s), false
	case sinkOf(s) != nil:
		r.kind, r.snk, stateful = config.Sink, sinkOf(s), false
	default:
		proc, ok := stage.TransformerOf(s)
		if !ok {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "stage",
				"%T is not a stage runner.New runs (a *transformer.Transformer, an *extractor.Extractor, a *sink.Stage or a *mqttbridge.Bridge)", s))
			break
		}
		r.kind, r.proc, stateful = config.Transformer, proc, proc.Stateful()
	}
	if s != nil {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	r.cfg = config.Defaults(r.kind)
	for _, o := range opts {
		o.apply(&r.cfg)
	}
	if err := r.cfg.Validate(r.kind, stateful); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, r.initOps())
	if r.snk != nil {
		errs = append(errs, sinkengine.Validate(&r.cfg, r.snk))
	}
	err := errors.Join(errs...)
	if err != nil {
		return nil, err
	}
	r.cfg.EnsureLogger()
	if r.proc != nil {
		// The policy travels with the transformer to every task and
		// batch (internal/batch applies it).
		r.policy = r.cfg.Policy()
		r.proc = batch.WithPolicy(r.proc, r.policy)
	}
	if r.snk != nil {
		r.policy = r.cfg.Policy() // applied by the sink engine
	}
	if x != nil {
		r.ex = extract.New(&r.cfg, x)
	}
	if r.brs != nil {
		if r.br, err = bridge.New(&r.cfg, r.brs); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Changelog returns the changelog topic of the runner's application: the
// state of a transformer, the cursors of an extractor.
func (r *Runner) Changelog() string { return r.cfg.Changelog() }

// Run processes (a transformer) or polls (an extractor) until ctx is
// canceled (then it stops gracefully and returns nil) or an error ends it.
// See the package documentation.
func (r *Runner) Run(ctx context.Context) error { return r.run(ctx, transform.Hooks{}) }

// run is Run with the transformer engine's test knobs: tests of this
// package pass them, Run passes none.
func (r *Runner) run(ctx context.Context, hooks transform.Hooks) (err error) {
	if !r.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	defer r.ops.begin(ctx, r.ex != nil)(&err)
	if r.br != nil {
		// Running (ready) once the first reconciliation subscribed the
		// active configs.
		return r.br.Run(ctx, func() {
			r.ops.mu.Lock()
			if r.ops.state < Stopping {
				r.ops.setLocked(Running, nil)
				r.ops.served = true
			}
			r.ops.mu.Unlock()
		})
	}
	if r.snk != nil {
		// A sink has no stores.
		return sinkengine.Run(ctx, sinkengine.Params{Cfg: &r.cfg, Sink: r.snk, Policy: r.policy})
	}
	defer r.pruneStores(ctx)()
	if r.ex != nil {
		return r.ex.Run(ctx)
	}
	return transform.Run(ctx, transform.Params{
		Cfg: &r.cfg, Proc: r.proc, Ops: &r.ops,
		ClientID: r.ops.clientID(), Hooks: hooks,
	})
}

// Wake polls the config of key now, ahead of its PollInterval, for sources
// that push a notice of new data (a webhook, a queue message). A poll of the
// config that is running when Wake is called is followed by another one at
// once. The woken poll waits for a concurrency slot like any due poll, and
// the next regular poll comes an interval after it started.
//
// Wake reports whether the poll will run on this instance: false when Run
// is not running, when the stage is a transformer, when key is not a live
// config, when the config is suspended (see extractor.Suspended), or when
// another instance holds its ownership token (then wake that instance, or
// let the interval poll it). Wake does not block and is safe for concurrent
// use.
func (r *Runner) Wake(key []byte) bool {
	if r.ex == nil {
		return false
	}
	return r.ex.Wake(key)
}

// sinkOf returns the engine view of s when s is a sink, else nil.
func sinkOf(s Stage) sinkstage.Sink {
	v, _ := sinkstage.SinkOf(s)
	return v
}

// bridgeOf returns the engine view of s when s is a bridge, else nil.
func bridgeOf(s Stage) bridge.Stage {
	b, _ := bridge.Of(s)
	return b
}
