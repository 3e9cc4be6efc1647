package transform

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/group"
	"github.com/flechtwerk/flechtwerk/internal/latch"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/topics"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// Params is what a transformer engine runs with.
type Params struct {
	// Cfg has been validated and has its logger and metrics.
	Cfg *config.Options
	// Proc is the transformer.
	Proc stage.Transformer
	// Policy decides what becomes of the invalid records of every batch
	// (and counts them); nil is Crash.
	Policy *batch.Policy
	// Ops learns the engine's progress (see Ops).
	Ops Ops
	// ClientID, when set, is the client id of the group member (the
	// runner advertises its query address in it).
	ClientID string
	// Hooks are the test and benchmark knobs; zero in production.
	Hooks Hooks
}

// Run runs a transformer: it checks the input topics and the declared
// output topics (creating those declared to be created), ensures the
// changelog, joins the group and runs the main loop until ctx ends (then
// it returns nil) or an error ends it; then it leaves the group and closes
// every task.
func Run(ctx context.Context, p Params) error {
	c := p.Cfg
	base := c.ClientOpts()

	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("runner: admin client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	infos, partitions, err := describeInputs(ctx, c, adm)
	if err != nil {
		return err
	}
	if dl := c.DeadLetterTopic(); dl != "" {
		if _, _, err := topics.Describe(ctx, adm, "dead-letter", []string{dl}); err != nil {
			return err
		}
	}
	storeTopics := storeTopics(c.ApplicationID, p.Proc)
	if o, ok := p.Proc.(stage.Outputs); ok {
		reserved := map[string]string{}
		if p.Proc.Stateful() {
			reserved[c.Changelog()] = "the changelog topic"
		}
		for _, s := range storeTopics {
			reserved[s.topic] = "the changelog topic of store " + s.name
		}
		if dl := c.DeadLetterTopic(); dl != "" {
			reserved[dl] = "the dead-letter topic"
		}
		if err := ensureOutputs(ctx, adm, o.Outputs(), c.InputTopics, reserved, c.Replication); err != nil {
			return err
		}
	}
	topicIDs := make(map[string][16]byte, len(infos))
	for name, info := range infos {
		topicIDs[name] = info.ID
	}
	// The cluster answered already (the inputs were described): a
	// transient error from here on is ridden out (startupRetry). Every
	// store's changelog is checked before any changelog is created: a
	// store whose topic was lost is refused, one added to an existing
	// application starts empty.
	for _, s := range storeTopics {
		if err := startupRetry(ctx, c, "checking the changelog of store "+s.name, func() error {
			return requireStoreChangelog(ctx, adm, c.Logger, s.topic, s.name, c.Group(), c.InputTopics)
		}); err != nil {
			return err
		}
	}
	var changelogTopic string
	if p.Proc.Stateful() {
		changelogTopic = c.Changelog()
		if err := startupRetry(ctx, c, "checking the changelog", func() error {
			if err := requireChangelogOrNewGroup(ctx, adm, c.Logger, changelogTopic, c.Group(), c.InputTopics); err != nil {
				return err
			}
			return changelog.Ensure(ctx, adm, changelogTopic, partitions, c.Replication)
		}); err != nil {
			return err
		}
	}
	for _, s := range storeTopics {
		// Created like the default changelog, or checked to have the
		// inputs' partitions.
		if err := startupRetry(ctx, c, "creating the changelog of store "+s.name, func() error {
			return changelog.Ensure(ctx, adm, s.topic, partitions, c.Replication)
		}); err != nil {
			return err
		}
	}

	rn := &run{
		c:           c,
		proc:        p.Proc,
		policy:      p.Policy,
		ops:         p.Ops,
		hooks:       p.Hooks,
		stores:      map[int32]*store.Store{},
		named:       map[int32]map[string]*store.Store{},
		storeSpecs:  storeTopics,
		offsetsMeta: changelog.StoresMetadata(storeTopicNames(storeTopics)),
		adm:         adm,
		base:        base,
		changelog:   changelogTopic,
		topicIDs:    topicIDs,
		partitions:  partitions,
		tasks:       map[int32]*task.Task{},
		pending:     map[int32]*task.Task{},
		workers:     map[int32]*worker{},
		restores:    map[int32]*restore{},
		restoreSlot: make(chan struct{}, 1),
		sem:         make(chan struct{}, c.Concurrency),
		wake:        make(chan struct{}, 1),
		epoch:       time.Now(),
		restarting:  map[int32]bool{},
		owners:      map[int32]string{},
		seeks:       map[int32]map[string]kgo.EpochOffset{},
		failing:     map[int32]*failing{},
	}
	if c.SharedProducer {
		id := sharedTransactionalID(c.ApplicationID)
		rn.shared = &shared{rn: rn, lane: task.NewLane(id, rn.taskConfig(-1, ""), p.Proc)}
		defer rn.shared.lane.Close()
		c.Logger.Info("transactions: shared-producer mode, one transaction per commit interval for all tasks of this instance",
			"transactional_id", id, "transaction_timeout", c.TransactionTimeout)
	} else {
		c.Logger.Info("transactions: a producer per task, each with its transactional id "+c.ApplicationID+"-{partition}",
			"partitions", partitions, "transaction_timeout", c.TransactionTimeout)
		if partitions >= manyPartitions {
			c.Logger.Info("with many partitions per instance, the shared-producer mode (runner.SharedProducer) commits one transaction per instance and interval instead of one per task",
				"partitions", partitions)
		}
	}
	// Cooperative: a rebalance stops only the tasks that move. The
	// balancer places a task that moves where its store is furthest
	// ahead (the members report the changelog offsets of the stores they
	// hold) and hands out the standby tasks (StandbyReplicas).
	var (
		bal   kgo.GroupBalancer
		stand standbyAssignment
	)
	if !p.Hooks.Eager {
		replicas := 0
		if task.KeepsState(p.Proc) {
			replicas = c.StandbyReplicas
		}
		b := group.NewBalancer(group.BalancerConfig{Standbys: replicas, Offsets: rn.changelogOffsets, Shared: c.SharedProducer})
		bal, stand = b, b
	}
	if err := rn.startStandbys(stand); err != nil {
		return err
	}
	// The user's consumer options come first: the delivery settings
	// come last and win (group.Opts).
	// A paused task's partitions resume only after the fetch in flight;
	// a short fetch wait keeps that short. The user's options win.
	consumerOpts := group.Opts(append(slices.Clone(base), kgo.FetchMaxWait(100*time.Millisecond)), c.ConsumerOpts, group.Member{
		Group:          c.Group(),
		Topics:         c.InputTopics,
		SessionTimeout: c.SessionTimeout,
		OnAssigned:     rn.onAssigned,
		OnRevoked:      rn.onRevoked,
		OnLost:         rn.onLost,
		Balancer:       bal, // nil: range (eager)
		Delivery: []kgo.Opt{
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			// Markers of upstream transactions are returned so that the
			// committed offset can pass them (see task.Process).
			kgo.KeepControlRecords(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.BlockRebalanceOnPoll(),
		},
	})
	if p.ClientID != "" {
		consumerOpts = append(consumerOpts, kgo.ClientID(p.ClientID))
	}
	consumer, err := kgo.NewClient(consumerOpts...)
	if err != nil {
		rn.closeStandbys()
		return fmt.Errorf("runner: consumer: %w", err)
	}
	rn.consumer = consumer
	defer p.Ops.Attach(Query{rn})()
	defer c.Metrics.Attach(source{rn})()

	runErr := rn.loop(ctx)
	if runErr != nil {
		// The workers see it and stop without committing.
		rn.fatal.Set(runErr)
	}
	// Leave the group (this runs onRevoked with every task, which commits
	// what the tasks processed, unless Run fails, and tears them down),
	// then make sure nothing is left open.
	rn.closing.Store(true)
	consumer.Close()
	rn.release(nil)
	rn.restoreWG.Wait()
	if err := rn.closeStandbys(); err != nil {
		rn.fatal.Set(err)
	}
	if runErr != nil {
		return runErr
	}
	return rn.fatalErr()
}

// run is the state of one Run.
type run struct {
	c          *config.Options
	proc       stage.Transformer
	policy     *batch.Policy
	ops        Ops
	hooks      Hooks
	adm        *kadm.Client
	base       []kgo.Opt
	consumer   *kgo.Client
	changelog  string
	topicIDs   map[string][16]byte
	partitions int32
	sem        chan struct{}

	// mu guards tasks, pending, workers and restores; it is held while
	// records are handed out and while a task changes state, never
	// across a restore, a commit or a transform.
	mu       sync.Mutex
	tasks    map[int32]*task.Task // restored and fetching
	pending  map[int32]*task.Task // fenced, waiting for or in restore
	workers  map[int32]*worker    // of tasks
	restores map[int32]*restore   // of pending tasks, while running
	// restoreSlot lets one restore run at a time; restoreWG counts the
	// restore goroutines.
	restoreSlot chan struct{}
	restoreWG   sync.WaitGroup
	// restarting are the tasks being started (newly assigned) or
	// re-initialized after a transient error (recover.go): their records
	// are dropped until seeks, the committed offsets read after their
	// fence to position their partitions at, are applied.
	restarting map[int32]bool
	seeks      map[int32]map[string]kgo.EpochOffset
	// owners is the member ID each task was assigned (or, after a
	// restart, found owned) under. A task commits only while the group
	// member still has that ID: kgo may rejoin as a new member without
	// calling OnPartitionsLost (an offset commit answered
	// UNKNOWN_MEMBER_ID), and the new member's valid generation must not
	// commit for a task another member may own by now.
	owners map[int32]string

	// fmu guards failing (tasks that failed with a transient error and
	// have not committed since) and groupLostAt (when the member last
	// lost its group session without holding an assignment since).
	fmu         sync.Mutex
	failing     map[int32]*failing
	groupLostAt time.Time
	// lost is set while OnPartitionsLost tears the tasks down (dirty);
	// closing once Run leaves the group.
	lost, closing atomic.Bool

	// commitMu serializes the group member's offset commits.
	commitMu sync.Mutex

	// qmu guards stores, the stores of the running tasks (nil value:
	// stateless): queries hold it shared; the engine takes it exclusively
	// before any store of a running task closes (publishTasks).
	qmu    sync.RWMutex
	stores map[int32]*store.Store
	// named are the named stores and the timer store of the running
	// tasks, by name; storeSpecs their names and changelogs.
	named      map[int32]map[string]*store.Store
	storeSpecs []storeTopic
	// offsetsMeta is the commit metadata of every input offset: the
	// store names (changelog.StoresMetadata).
	offsetsMeta string

	// standby holds the standby replicas (StandbyReplicas).
	standby standbys

	// shared runs the shared-producer mode's transactions (nil: the
	// default mode, a producer per task).
	shared *shared

	fatal latch.Latch
	wake  chan struct{}
	// epoch is the first of the commit ticks (see tick).
	epoch time.Time
}

func (rn *run) setFatal(err error) {
	rn.fatal.Set(err)
	rn.poke()
}

func (rn *run) fatalErr() error { return rn.fatal.Err() }

// poke wakes a main loop blocked in a poll.
func (rn *run) poke() { latch.Poke(rn.wake) }

// storeTopic is a named store (or the timer store) of a transformer and
// its changelog topic.
type storeTopic struct {
	name, topic string
	timers      bool
}

// storeTopics returns the named stores of proc, then its timer store,
// with their changelogs; none for a processor without (process.Stores).
func storeTopics(app string, proc stage.Transformer) []storeTopic {
	sp, ok := proc.(process.Stores)
	if !ok {
		return nil
	}
	var out []storeTopic
	for _, s := range sp.Stores() {
		out = append(out, storeTopic{name: s.Name, topic: changelog.StoreTopic(app, s.Name)})
	}
	if sp.Timers() {
		out = append(out, storeTopic{name: task.TimersStore, topic: changelog.TimersTopic(app), timers: true})
	}
	return out
}

// storeNames returns the names of storeSpecs.
func (rn *run) storeNames() []string { return storeTopicNames(rn.storeSpecs) }

func storeTopicNames(specs []storeTopic) []string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.name
	}
	return names
}
