package extract

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/group"
	"github.com/flechtwerk/flechtwerk/internal/latch"
	"github.com/flechtwerk/flechtwerk/internal/retry"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/topics"
)

// Engine runs one extractor. The runner builds it with New over checked
// options and calls Run once.
type Engine struct {
	o *config.Options
	x stage.Extractor

	mu  sync.Mutex
	cur *run // the running Run, for Wake
}

// New returns the engine of extractor x. o must have passed Validate for
// an extractor and have a logger.
func New(o *config.Options, x stage.Extractor) *Engine { return &Engine{o: o, x: x} }

// Wake polls the config of key now, ahead of its PollInterval; see
// runner.Runner.Wake.
func (e *Engine) Wake(key []byte) bool {
	e.mu.Lock()
	rn := e.cur
	e.mu.Unlock()
	if rn == nil {
		return false
	}
	return rn.wakeKey(key)
}

// Run polls until ctx is canceled (then it stops gracefully and returns
// nil) or an error ends it.
func (e *Engine) Run(ctx context.Context) error {
	o := e.o
	rn := &run{e: e, o: o, wake: make(chan struct{}, 1), tokens: map[int32]*token{}, sched: map[string]*schedule{},
		sem: make(chan struct{}, o.Concurrency), changelog: o.Changelog(), pollPol: pollPolicy(o.Retry.Poll)}

	admCl, err := kgo.NewClient(o.ClientOpts()...)
	if err != nil {
		return fmt.Errorf("extractor: admin client: %w", err)
	}
	defer admCl.Close()
	rn.adm = kadm.NewClient(admCl)

	_, n, err := topics.Describe(ctx, rn.adm, "config", o.ConfigTopics)
	if err != nil {
		return err
	}
	rn.n = n
	if err := changelog.Ensure(ctx, rn.adm, rn.changelog, n, o.Replication); err != nil {
		return err
	}
	tableOpts := []configtopic.Opt{
		configtopic.SeedBrokers(o.Brokers...),
		configtopic.Topics(o.ConfigTopics...),
		configtopic.Codec(e.x.DecodeConfig()),
		configtopic.WithKafkaOpts(o.KafkaOpts...),
		configtopic.WithLogger(o.Logger),
	}
	if enrich := e.x.EnrichConfig(); enrich != nil {
		tableOpts = append(tableOpts, configtopic.Enrich(enrich))
	}
	table, err := configtopic.New[any](tableOpts...)
	if err != nil {
		return err
	}
	rn.table = table
	defer o.Metrics.Attach(source{table})()
	e.mu.Lock()
	e.cur = rn
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.cur = nil
		e.mu.Unlock()
	}()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	rn.ctx, rn.cancel = runCtx, cancel

	rn.wg.Add(1)
	go func() {
		defer rn.wg.Done()
		if err := table.Run(runCtx); err != nil {
			rn.setFatal(fmt.Errorf("extractor: config table: %w", err))
		}
	}()

	var consumer *kgo.Client
	if err := table.WaitReady(runCtx); err == nil {
		// The user's consumer options come first; the delivery settings
		// (range assignment, no auto-commit, the token callbacks) win.
		consumerOpts := group.Opts(o.ClientOpts(), o.ConsumerOpts, group.Member{
			Group:          o.Group(),
			Topics:         o.ConfigTopics,
			SessionTimeout: o.SessionTimeout,
			OnAssigned:     rn.onAssigned,
			OnRevoked:      rn.onRevoked,
		})
		consumer, err = kgo.NewClient(consumerOpts...)
		if err != nil {
			rn.setFatal(fmt.Errorf("extractor: group member: %w", err))
		} else {
			// The group only hands out ownership; the config records
			// are read in full by the table.
			consumer.PauseFetchTopics(o.ConfigTopics...)
			rn.loop(runCtx)
		}
	} else if runCtx.Err() == nil {
		rn.setFatal(err)
	}

	cancel()
	if consumer != nil {
		// Leaving the group runs onRevoked, which tears the tokens down.
		consumer.Close()
	}
	rn.teardown(rn.takeTokens(nil))
	rn.wg.Wait()
	return rn.fatalErr()
}

// run is the state of one Run.
type run struct {
	e         *Engine
	o         *config.Options
	adm       *kadm.Client
	changelog string
	n         int32
	table     *configtopic.Table[any]
	ctx       context.Context
	cancel    context.CancelFunc
	sem       chan struct{}
	wg        sync.WaitGroup
	pollPol   *retry.Policy // PollRetry; nil: none

	// mu guards tokens and sched.
	mu     sync.Mutex
	tokens map[int32]*token
	sched  map[string]*schedule

	fatal latch.Latch
	wake  chan struct{}
}

func (rn *run) setFatal(err error) {
	rn.fatal.Set(err)
	rn.cancel()
}

func (rn *run) fatalErr() error { return rn.fatal.Err() }

func (rn *run) poke() { latch.Poke(rn.wake) }

// loop starts due polls until ctx ends.
func (rn *run) loop(ctx context.Context) {
	for ctx.Err() == nil {
		changed := rn.table.Changed()
		next := rn.startDue()
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
		case <-rn.wake:
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}
