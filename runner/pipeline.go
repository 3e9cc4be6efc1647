package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/config"
)

// Pipeline runs several stages in one process: for example a transformer
// that re-keys its input into a repartition topic, and a transformer that
// aggregates by the new key. Build it with NewPipeline, add its stages
// with AddTransformer (AddExtractor, AddSink, AddBridge), declare its
// repartition topics with Repartition, and Run it once.
//
// Each stage stays its own exactly-once unit with its own application id:
// its consumer group, transactional IDs, changelog and state directory.
// The stages run as independent engines in the process: a slow stage does
// not stall another's commits. Between stages, records travel through
// Kafka topics read read_committed, so each hop between transformers and
// extractors is exactly-once and a record's effects reach the end of those
// hops exactly once; a stage added with AddSink or AddBridge is a hop of
// its own delivery (at least once or at most once). Each hop adds up to
// one commit interval of latency (see docs/concepts.md).
//
// The pipeline has one lifecycle (Run), one health and readiness view
// (Healthy, Ready, Handler), and, when given to NewPipeline, one logger
// and one metrics registry for every stage.
type Pipeline struct {
	name    string
	opts    []Opt
	logger  *slog.Logger          // WithLogger of the pipeline; nil: none
	reg     prometheus.Registerer // Metrics of the pipeline; nil: none
	stages  []*Runner
	parts   []repartition
	started atomic.Bool
}

// NewPipeline returns an empty pipeline called name (it names the
// pipeline in errors and in the log). opts are options of every stage,
// applied before the stage's own: SeedBrokers and WithKafkaOpts give
// defaults that a stage's options may extend or replace. WithLogger and
// Metrics are shared by every stage: each stage logs through the
// pipeline's logger with the attributes pipeline and stage (its
// application id), and registers its metrics on the pipeline's registry
// under its application id; a stage that sets another logger or registry
// is refused by the Add method (flechtwerk.CodeInvalidOption). ApplicationID
// is the stage's own and may not be given here.
func NewPipeline(name string, opts ...Opt) (*Pipeline, error) {
	p := &Pipeline{name: name, opts: opts}
	var errs []error
	if name == "" {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "NewPipeline", "the pipeline name is empty"))
	}
	var c config.Options
	for _, o := range opts {
		o.apply(&c)
	}
	if c.ApplicationID != "" {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "ApplicationID",
			"pipeline %s: ApplicationID names one stage; give it to the stage, not to the pipeline", name))
	}
	p.logger, p.reg = c.Logger, c.Registerer
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.name }

// AddTransformer builds the runner of a transformer with the pipeline's
// options and opts, as NewTransformer does, and adds it to the pipeline.
// Besides the problems NewTransformer reports, it refuses a logger or a
// metrics registry other than the pipeline's, and an application id
// that another stage of the pipeline has (flechtwerk.CodeInvalidOption).
// It must be called before Run.
func (p *Pipeline) AddTransformer(s Stage, opts ...TransformerOpt) (*Runner, error) {
	return addStage(p, config.Transformer, s, opts)
}

// AddExtractor is AddTransformer for an extractor (NewExtractor).
func (p *Pipeline) AddExtractor(s Stage, opts ...ExtractorOpt) (*Runner, error) {
	return addStage(p, config.Extractor, s, opts)
}

// AddSink is AddTransformer for a sink (NewSink).
func (p *Pipeline) AddSink(s Stage, opts ...SinkOpt) (*Runner, error) {
	return addStage(p, config.Sink, s, opts)
}

// AddBridge is AddTransformer for an MQTT bridge (NewBridge).
func (p *Pipeline) AddBridge(s Stage, opts ...BridgeOpt) (*Runner, error) {
	return addStage(p, config.Bridge, s, opts)
}

// applier is an option of any kind.
type applier interface{ apply(*config.Options) }

// addStage builds the runner of a stage of kind with the pipeline's
// options, then opts, then the shared logger and registry.
func addStage[O applier](p *Pipeline, kind config.Kind, s Stage, opts []O) (*Runner, error) {
	if p.started.Load() {
		return nil, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "pipeline "+p.name,
			"a stage was added after Run; add every stage before Run")
	}
	var own config.Options
	for _, o := range opts {
		o.apply(&own)
	}
	id := own.ApplicationID
	var errs []error
	if p.logger != nil && own.Logger != nil && own.Logger != p.logger {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "WithLogger",
			"stage %s of pipeline %s sets its own logger; the pipeline's logger is every stage's", id, p.name))
	}
	if p.reg != nil && own.Registerer != nil && !sameRegisterer(own.Registerer, p.reg) {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Metrics",
			"stage %s of pipeline %s sets its own metrics registry; the pipeline's registry is every stage's", id, p.name))
	}
	if id != "" && p.Stage(id) != nil {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "ApplicationID",
			"pipeline %s has a stage %s already; every stage needs its own application id", p.name, id))
	}
	all := make([]applier, 0, len(p.opts)+len(opts)+1)
	for _, o := range p.opts {
		all = append(all, o)
	}
	for _, o := range opts {
		all = append(all, o)
	}
	all = append(all, setter(func(c *config.Options) {
		if p.logger != nil {
			c.Logger = p.logger.With("pipeline", p.name, "stage", c.ApplicationID)
		}
		if p.reg != nil {
			c.Registerer = p.reg
		}
	}))
	r, err := newRunner(kind, s, all)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.stages = append(p.stages, r)
	return r, nil
}

// sameRegisterer compares two registerers, false when their dynamic type
// is not comparable.
func sameRegisterer(a, b prometheus.Registerer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// Stages returns the pipeline's runners in the order they were added.
func (p *Pipeline) Stages() []*Runner { return slices.Clone(p.stages) }

// Stage returns the runner of the stage with application id id, nil when
// the pipeline has none.
func (p *Pipeline) Stage(id string) *Runner {
	for _, r := range p.stages {
		if r.cfg.ApplicationID == id {
			return r
		}
	}
	return nil
}

// ApplicationID returns the runner's application id.
func (r *Runner) ApplicationID() string { return r.cfg.ApplicationID }

// StageError is the error of one stage that ended a pipeline's Run. The
// stage's own error (Err) says what happened to its open transaction; the
// other stages were stopped gracefully, each committing its own work.
type StageError struct {
	// Pipeline and Stage name the pipeline and the stage (its
	// application id).
	Pipeline, Stage string
	// Err is the error the stage's Run returned.
	Err error
}

func (e *StageError) Error() string {
	return fmt.Sprintf("runner: pipeline %s: stage %s: %v", e.Pipeline, e.Stage, e.Err)
}

// Unwrap returns Err.
func (e *StageError) Unwrap() error { return e.Err }

// Run checks the pipeline (problems are *flechtwerk.ConfigError values,
// all reported at once, before anything starts), creates or checks its
// repartition topics (see Repartition), then runs every stage, each on its
// own goroutines, until ctx is canceled (every stage then stops
// gracefully, committing its own work, and Run returns nil; also when ctx
// ends before the stages started) or a stage fails. While the stages run,
// Run purges the records of the repartition topics that every stage
// reading them committed. The first stage that fails ends the whole
// pipeline: the others are stopped gracefully, and Run returns a
// *StageError naming the failed stage (joined with the errors of other
// stages that failed while stopping). Every goroutine Run started has
// exited when it returns. A second call returns ErrRunTwice, as does a stage's own Run called besides the pipeline's.
func (p *Pipeline) Run(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	if err := p.validate(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	var pg *purger
	if len(p.parts) > 0 {
		cl, err := kgo.NewClient(p.Stage(p.parts[0].to).cfg.ClientOpts()...)
		if err != nil {
			return fmt.Errorf("runner: pipeline %s: admin client: %w", p.name, err)
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		if err := p.ensureRepartitions(ctx, adm); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil // canceled before the stages started
			}
			return err
		}
		pg = &purger{p: p, adm: adm, done: map[string]map[int32]int64{}}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		rest  []error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		} else {
			rest = append(rest, err)
		}
		mu.Unlock()
		cancel()
	}
	if pg != nil {
		wg.Go(func() { pg.run(runCtx) })
	}
	for _, r := range p.stages {
		wg.Go(func() {
			err := r.Run(runCtx)
			if err == nil {
				return
			}
			err = &StageError{Pipeline: p.name, Stage: r.cfg.ApplicationID, Err: err}
			mu.Lock()
			logIt := first == nil && p.logger != nil
			mu.Unlock()
			if logIt {
				p.logger.Error("pipeline stage failed; stopping the others", "pipeline", p.name,
					"stage", r.cfg.ApplicationID, "err", err)
			}
			fail(err)
		})
	}
	wg.Wait()
	if first == nil {
		return nil
	}
	return errors.Join(append([]error{first}, rest...)...)
}

// validate reports every static problem of the pipeline at once.
func (p *Pipeline) validate() error {
	var errs []error
	if len(p.stages) == 0 {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "pipeline "+p.name, "the pipeline has no stages"))
	}
	errs = append(errs, p.validateRepartitions()...)
	return errors.Join(errs...)
}

// Healthy reports nil while every stage is healthy (see Runner.Healthy),
// else the problems of the stages that are not, each naming its stage.
func (p *Pipeline) Healthy() error { return p.check((*Runner).Healthy) }

// Ready reports nil while every stage is ready (see Runner.Ready), else
// the problems of the stages that are not, each naming its stage.
func (p *Pipeline) Ready() error { return p.check((*Runner).Ready) }

func (p *Pipeline) check(probe func(*Runner) error) error {
	if len(p.stages) == 0 {
		return fmt.Errorf("runner: pipeline %s has no stages", p.name)
	}
	var errs []error
	for _, r := range p.stages {
		if err := probe(r); err != nil {
			errs = append(errs, fmt.Errorf("stage %s: %w", r.cfg.ApplicationID, err))
		}
	}
	return errors.Join(errs...)
}
