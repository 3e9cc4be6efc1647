package runner

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/engine/bridge"
	"github.com/flechtwerk/flechtwerk/internal/engine/extract"
	sinkengine "github.com/flechtwerk/flechtwerk/internal/engine/sink"
	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/task"
)

// Stage is what a Runner runs: a *transformer.Stage (NewTransformer), an
// *extractor.Stage (NewExtractor), a *sink.Stage (NewSink) or a
// *mqttbridge.Bridge (NewBridge). Other types are refused by the
// constructors.
type Stage interface {
	// Validate reports a problem found when the stage was built.
	Validate() error
}

// Runner runs one stage: a transformer, an extractor, a sink or an MQTT
// bridge. Build it with the constructor of the stage's kind
// (NewTransformer, NewExtractor, NewSink, NewBridge); Run it once.
type Runner struct {
	cfg     config.Options
	kind    config.Kind
	proc    stage.Transformer // a transformer
	ex      *extract.Engine   // an extractor
	policy  *batch.Policy     // a transformer's invalid-record policy
	snk     stage.Sink        // a sink
	brs     bridge.Stage      // a bridge (package mqttbridge)
	br      *bridge.Engine
	life    []flechtwerk.Lifecycle // the stage's and its codecs' (lifecycle.go)
	started atomic.Bool
	ops     ops
}

// ErrRunTwice is returned by a second call of Run on the same Runner.
var ErrRunTwice = errors.New("runner: Run called twice; build a new Runner")

// NewTransformer checks a transformer (a *transformer.Stage) and its
// options and returns its Runner. Every problem is reported at once as
// *flechtwerk.ConfigError values joined with errors.Join: a stage of
// another kind (flechtwerk.CodeWrongStageKind), a problem of the stage, and
// option values that are out of range, missing or contradict each other.
// An option of another kind does not compile. It does no I/O: problems that
// need the cluster (missing topics, partition counts, the changelog) are
// reported by Run before anything is consumed.
func NewTransformer(s Stage, opts ...TransformerOpt) (*Runner, error) {
	return newRunner(config.Transformer, s, opts)
}

// NewExtractor checks an extractor (an *extractor.Stage) and its
// options and returns its Runner, reporting every problem at once like
// NewTransformer. Problems that need the cluster are reported by Run
// before anything is polled.
func NewExtractor(s Stage, opts ...ExtractorOpt) (*Runner, error) {
	return newRunner(config.Extractor, s, opts)
}

// NewSink checks a sink (a *sink.Stage) and its options, among them their
// agreement with the sink's delivery mode (flechtwerk.CodeDeliveryConflict),
// and returns its Runner, reporting every problem at once like
// NewTransformer.
func NewSink(s Stage, opts ...SinkOpt) (*Runner, error) {
	return newRunner(config.Sink, s, opts)
}

// NewBridge checks an MQTT bridge (a *mqttbridge.Bridge) and its options
// and returns its Runner, reporting every problem at once like
// NewTransformer.
func NewBridge(s Stage, opts ...BridgeOpt) (*Runner, error) {
	return newRunner(config.Bridge, s, opts)
}

// constructors names the constructor of each stage kind.
var constructors = map[config.Kind]string{
	config.Transformer: "NewTransformer",
	config.Extractor:   "NewExtractor",
	config.Sink:        "NewSink",
	config.Bridge:      "NewBridge",
}

// kindOf returns the kind of s, false when s is no stage a runner runs.
func kindOf(s Stage) (config.Kind, bool) {
	if _, ok := stage.ExtractorOf(s); ok {
		return config.Extractor, true
	}
	if bridgeOf(s) != nil {
		return config.Bridge, true
	}
	if sinkOf(s) != nil {
		return config.Sink, true
	}
	if _, ok := stage.TransformerOf(s); ok {
		return config.Transformer, true
	}
	return 0, false
}

// newRunner builds the runner of a stage that must be of kind.
func newRunner[O interface{ apply(*config.Options) }](kind config.Kind, s Stage, opts []O) (*Runner, error) {
	r := &Runner{kind: kind}
	var (
		errs     []error
		stateful = kind == config.Transformer || kind == config.Extractor
		x        stage.Extractor
	)
	if s == nil {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "stage", "%s is nil", kind))
	} else if stage.Unbuilt(s) {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "stage",
			"%T is nil or was not built by its constructor (transformer.New or From, extractor.New or From, sink.New, mqttbridge.New)", s))
	} else if got, ok := kindOf(s); !ok {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "stage",
			"%T is not a stage a runner runs (a *transformer.Stage, an *extractor.Stage, a *sink.Stage or a *mqttbridge.Bridge)", s))
	} else if got != kind {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeWrongStageKind, "stage",
			"%T is %s, given to %s: run it with runner.%s", s, got, constructors[kind], constructors[got]))
	} else {
		switch kind {
		case config.Extractor:
			x, _ = stage.ExtractorOf(s)
		case config.Bridge:
			r.brs = bridgeOf(s)
		case config.Sink:
			r.snk = sinkOf(s)
		case config.Transformer:
			r.proc, _ = stage.TransformerOf(s)
			stateful = task.KeepsState(r.proc)
		}
	}
	if s != nil {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	r.cfg = config.Defaults(kind)
	for _, o := range opts {
		o.apply(&r.cfg)
	}
	r.cfg.Settle()
	if err := r.cfg.Validate(kind, stateful); err != nil {
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
	r.life = lifecycles(s)
	if r.proc != nil {
		// The policy goes to every task (task.Config.Policy), which
		// passes it to every batch (internal/batch applies it).
		r.policy = r.cfg.Policy()
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
// state of a transformer, the cursors of an extractor (sinks and bridges
// have none).
func (r *Runner) Changelog() string { return r.cfg.Changelog() }

// Run processes (a transformer), polls (an extractor), writes (a sink) or
// relays (a bridge) until ctx is canceled (then it stops gracefully and
// returns nil) or an error ends it. See the package documentation. When
// the user's value the stage was built from implements
// flechtwerk.Lifecycle, Run opens it before anything is consumed or polled
// (an error is an *OpenError and ends Run at once) and closes it after
// everything Run started has stopped, joining Close's error into Run's;
// so it does with the codecs a transformer encodes with (its state codec
// and its declared outputs' key and value codecs; not the input codec,
// which only decodes) that implement flechtwerk.Lifecycle, after the
// stage's value.
// Close is not called when Run ends with a *BatchTimeoutError: a transform
// that ignored its ctx may still be running and using what Close would
// release.
func (r *Runner) Run(ctx context.Context) error { return r.run(ctx, transform.Hooks{}) }

// run is Run with the transformer engine's test knobs: tests of this
// package pass them, Run passes none.
func (r *Runner) run(ctx context.Context, hooks transform.Hooks) (err error) {
	if !r.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	defer r.ops.begin(ctx)(&err)
	closeStage, err := r.openStage(ctx)
	if err != nil {
		return err
	}
	defer closeStage(&err)
	if r.ex != nil {
		// An extractor serves (is ready) from its start, once its
		// stage is open.
		r.ops.serve()
	}
	if r.br != nil {
		// Running (ready) once the first reconciliation subscribed the
		// active configs.
		return r.br.Run(ctx, r.ops.serve)
	}
	if r.snk != nil {
		// A sink has no stores.
		return sinkengine.Run(ctx, sinkengine.Params{Cfg: &r.cfg, Sink: r.snk, Policy: r.policy, Ready: r.ops.serve})
	}
	defer r.pruneStores(ctx)()
	if r.ex != nil {
		return r.ex.Run(ctx)
	}
	return transform.Run(ctx, transform.Params{
		Cfg: &r.cfg, Proc: r.proc, Policy: r.policy, Ops: &r.ops,
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
// is not running, when the stage is not an extractor, when key is not a live
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
func sinkOf(s Stage) stage.Sink {
	v, _ := stage.SinkOf(s)
	return v
}

// bridgeOf returns the engine view of s when s is a bridge, else nil.
func bridgeOf(s Stage) bridge.Stage {
	b, _ := bridge.Of(s)
	return b
}
