package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/group"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/topics"
	"github.com/flechtwerk/flechtwerk/task"
)

// Runner runs one transformer. Build it with New; Run it once.
type Runner struct {
	cfg     cfg
	proc    stage.Transformer
	started atomic.Bool
}

// ErrRunTwice is returned by a second call of Run on the same Runner.
var ErrRunTwice = errors.New("runner: Run called twice; build a new Runner with New")

// Stage is a stage a Runner runs: a *transformer.Transformer or an
// *extractor.Extractor. Values of other types are reported by New with
// flechtwerk.CodeInvalidTransformer.
type Stage interface{ Validate() error }

// New checks the configuration and returns a Runner for s. Every problem is
// reported at once as *flechtwerk.ConfigError values joined with
// errors.Join; New does no I/O. Problems that need the cluster (missing
// topics, partition counts, the changelog) are reported by Run before
// anything is consumed.
func New(s Stage, opts ...Opt) (*Runner, error) {
	c := defaults()
	for _, o := range opts {
		o.apply(&c)
	}
	var (
		errs []error
		proc stage.Transformer
	)
	if s == nil {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "transformer", "transformer is nil"))
	} else if t, ok := stage.TransformerOf(s); !ok {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "transformer",
			"%T is not a stage runner.New runs (a *transformer.Transformer)", s))
	} else {
		proc = t
		if err := t.Validate(); err != nil {
			errs = append(errs, err)
		}
		if err := c.validate(t.Stateful()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: c, proc: proc}, nil
}

// Changelog returns the changelog topic of the runner's application.
func (r *Runner) Changelog() string { return changelog.Topic(r.cfg.appID) }

// Run processes until ctx is canceled (then it stops gracefully and returns
// nil) or an error ends it. See the package documentation.
func (r *Runner) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	c := &r.cfg
	base := append([]kgo.Opt{kgo.SeedBrokers(c.brokers...), kgo.WithLogger(kslog.New(c.logger))}, c.kafkaOpts...)

	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("runner: admin client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	infos, partitions, err := topics.Describe(ctx, adm, "input", c.inputs)
	if err != nil {
		return err
	}
	topicIDs := make(map[string][16]byte, len(infos))
	for name, info := range infos {
		topicIDs[name] = info.ID
	}
	var changelogTopic string
	if r.proc.Stateful() {
		changelogTopic = changelog.Topic(c.appID)
		if err := changelog.Ensure(ctx, adm, changelogTopic, partitions, c.replication); err != nil {
			return err
		}
	}

	defer r.pruneStores(ctx)()

	rn := &run{
		r:          r,
		adm:        adm,
		base:       base,
		changelog:  changelogTopic,
		topicIDs:   topicIDs,
		partitions: partitions,
		tasks:      map[int32]*task.Task{},
		pending:    map[int32]*task.Task{},
		sem:        make(chan struct{}, c.concurrency),
		wake:       make(chan struct{}, 1),
	}
	// The user's consumer options come first: the delivery settings
	// come last and win (group.Opts).
	consumerOpts := group.Opts(base, c.consumerOpts, group.Member{
		Group:          c.appID,
		Topics:         c.inputs,
		SessionTimeout: c.sessionTimout,
		OnAssigned:     rn.onAssigned,
		OnRevoked:      rn.onRevoked,
		Delivery: []kgo.Opt{
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			// Markers of upstream transactions are returned so that the
			// committed offset can pass them (see task.Process).
			kgo.KeepControlRecords(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.BlockRebalanceOnPoll(),
		},
	})
	consumer, err := kgo.NewClient(consumerOpts...)
	if err != nil {
		return fmt.Errorf("runner: consumer: %w", err)
	}
	rn.consumer = consumer

	runErr := rn.loop(ctx)
	// Leave the group (this runs onRevoked, which tears the tasks down),
	// then make sure nothing is left open.
	consumer.Close()
	rn.teardown()
	if runErr != nil {
		return runErr
	}
	return rn.fatalErr()
}

// run is the state of one Run.
type run struct {
	r          *Runner
	adm        *kadm.Client
	base       []kgo.Opt
	consumer   *kgo.Client
	changelog  string
	topicIDs   map[string][16]byte
	partitions int32
	sem        chan struct{}

	// mu is the batch lock: it guards tasks and pending, and is held while
	// a batch runs and while a task restores.
	mu      sync.Mutex
	tasks   map[int32]*task.Task // restored and fetching
	pending map[int32]*task.Task // fenced, waiting for restore

	// rmu guards revoking and cancelRestore, so that a revocation can cut a
	// restore short instead of waiting for it under mu.
	rmu           sync.Mutex
	revoking      bool
	cancelRestore context.CancelFunc

	fatalMu sync.Mutex
	fatal   error
	wake    chan struct{}
}

func (rn *run) setFatal(err error) {
	rn.fatalMu.Lock()
	if rn.fatal == nil {
		rn.fatal = err
	}
	rn.fatalMu.Unlock()
	rn.poke()
}

func (rn *run) fatalErr() error {
	rn.fatalMu.Lock()
	defer rn.fatalMu.Unlock()
	return rn.fatal
}

// poke wakes a main loop blocked in a poll.
func (rn *run) poke() {
	select {
	case rn.wake <- struct{}{}:
	default:
	}
}

func (rn *run) loop(ctx context.Context) error {
	c := &rn.r.cfg
	for {
		if err := rn.fatalErr(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := rn.initPending(ctx); err != nil {
			return err
		}

		pollCtx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-rn.wake:
				cancel()
			case <-stop:
			}
		}()
		fetches := rn.consumer.PollRecords(pollCtx, c.maxPoll)
		close(stop)
		cancel()

		if fetches.IsClientClosed() {
			return nil
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			if ferr == nil {
				ferr = fetchError(t, p, err)
			}
		})
		if ferr != nil {
			rn.consumer.AllowRebalance()
			return ferr
		}
		recs := fetches.Records()
		if len(recs) == 0 {
			rn.consumer.AllowRebalance()
			continue
		}
		err := rn.batch(ctx, recs)
		rn.consumer.AllowRebalance()
		if err != nil {
			return err
		}
	}
}

// batch processes and commits one poll's records, one transaction per task.
func (rn *run) batch(ctx context.Context, recs []*kgo.Record) error {
	c := &rn.r.cfg
	rn.mu.Lock()
	defer rn.mu.Unlock()

	byTask := map[int32][]*kgo.Record{}
	for _, rec := range recs {
		if _, ok := rn.tasks[rec.Partition]; !ok {
			// Cannot happen with eager range assignment and rebalances
			// blocked while a batch runs; a record here would be
			// silently skipped, so stop instead.
			return fmt.Errorf("runner: fetched topic %s partition %d offset %d, which no running task owns", rec.Topic, rec.Partition, rec.Offset)
		}
		byTask[rec.Partition] = append(byTask[rec.Partition], rec)
	}
	// The batch finishes even when ctx is canceled (graceful stop); it is
	// bounded by BatchTimeout.
	deadline := time.Now().Add(c.batchTimeout)
	bctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()

	type result struct {
		t   *task.Task
		b   *task.Batch
		err error
	}
	// Buffered for every task: a goroutine abandoned at the deadline
	// sends its late result here and exits without a reader.
	results := make(chan result, len(byTask))
	// A task enters its commit only while the batch is not abandoned;
	// once it did, the batch waits for it (a commit is bounded by the
	// deadline and its abort), so a task named in a BatchTimeoutError
	// never committed anything of the batch.
	var (
		phaseMu    sync.Mutex
		abandoned  bool
		committing = make(map[int32]bool, len(byTask))
	)
	for n, trecs := range byTask {
		t := rn.tasks[n]
		go func() {
			b, err := t.Process(bctx, trecs, rn.sem)
			if err == nil && !b.Empty() {
				phaseMu.Lock()
				if abandoned {
					phaseMu.Unlock()
					return // discarded; the result is nobody's
				}
				committing[n] = true
				phaseMu.Unlock()
				err = t.Commit(bctx, b)
			}
			results <- result{t, b, err}
		}()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	reported := make(map[int32]bool, len(byTask))
	var (
		timedOut []int32
		got      []result
	)
	take := func(res result) {
		n := res.t.Partition()
		reported[n] = true
		phaseMu.Lock()
		inCommit := committing[n]
		phaseMu.Unlock()
		if !inCommit && res.err != nil && bctx.Err() != nil && errors.Is(res.err, context.DeadlineExceeded) {
			timedOut = append(timedOut, n) // the transform honored the deadline
			return
		}
		got = append(got, res)
	}
	for len(reported) < len(byTask) {
		select {
		case res := <-results:
			take(res)
			continue
		case <-timer.C:
		}
		// A transform that ignores ctx would hold the batch lock (and
		// so every rebalance) forever: stop waiting for the tasks still
		// in Process. Their goroutines are abandoned: they never reach
		// Commit, and find their tasks closed by the teardown that
		// follows. See BatchTimeout.
		phaseMu.Lock()
		abandoned = true
		var wait []int32
		for n := range byTask {
			switch {
			case reported[n]:
			case committing[n]:
				wait = append(wait, n)
			default:
				timedOut = append(timedOut, n)
			}
		}
		phaseMu.Unlock()
		for !allReported(reported, wait) {
			res := <-results
			if n := res.t.Partition(); slices.Contains(wait, n) {
				take(res)
			}
		}
		break
	}
	if len(timedOut) > 0 {
		slices.Sort(timedOut)
		first := map[int32]map[string]int64{}
		for _, n := range timedOut {
			first[n] = map[string]int64{}
			for _, rec := range byTask[n] {
				if o, ok := first[n][rec.Topic]; !ok || rec.Offset < o {
					first[n][rec.Topic] = rec.Offset
				}
			}
		}
		// Errors of the other tasks are reported too; no offset is
		// committed outside a transaction: Run ends here.
		var errs []error
		for _, res := range got {
			if res.err != nil {
				errs = append(errs, res.err)
			}
		}
		return errors.Join(&BatchTimeoutError{Partitions: timedOut, Timeout: c.batchTimeout, FirstOffsets: first}, errors.Join(errs...))
	}

	var (
		errs  []error
		empty = map[string]map[int32]kgo.EpochOffset{}
	)
	for _, res := range got {
		if res.err != nil {
			errs = append(errs, res.err)
			continue
		}
		if res.b.Empty() {
			for topic, off := range res.b.Offsets {
				if empty[topic] == nil {
					empty[topic] = map[int32]kgo.EpochOffset{}
				}
				empty[topic][res.t.Partition()] = kgo.EpochOffset{Epoch: -1, Offset: off}
			}
		}
	}
	if len(empty) > 0 {
		// Batches that wrote nothing open no transaction (the client
		// would never end an offsets-only one); the group member
		// commits their offsets, checked against its generation. No
		// transaction of these tasks is open now, and their earlier
		// transactional commits were appended before this one.
		if err := rn.commitDirect(bctx, empty); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

func allReported(reported map[int32]bool, ns []int32) bool {
	for _, n := range ns {
		if !reported[n] {
			return false
		}
	}
	return true
}

func (rn *run) commitDirect(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) error {
	var cerr error
	rn.consumer.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = fmt.Errorf("committing offsets of idle batch: %w", err)
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = fmt.Errorf("committing offset of topic %s partition %d: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	return cerr
}

// initPending restores every pending task and resumes its partitions. A
// revocation cuts a restore short; the revocation then tears it down.
func (rn *run) initPending(ctx context.Context) error {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	ns := make([]int32, 0, len(rn.pending))
	for n := range rn.pending {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	// Resume the restored tasks' partitions together, once all restores
	// ended (no batch runs before that anyway: this holds the batch lock).
	// Resumed one by one, the first would start a fetch that long-polls
	// (FetchMaxWait, 5s by default) on partitions without new records,
	// and the partitions resumed after it would wait for that fetch.
	var ready []int32
	defer func() {
		if len(ready) > 0 {
			rn.consumer.ResumeFetchPartitions(rn.topicPartitions(ready...))
		}
	}()
	for _, n := range ns {
		t := rn.pending[n]
		rn.rmu.Lock()
		if rn.revoking {
			rn.rmu.Unlock()
			return nil
		}
		rctx, cancel := context.WithCancel(ctx)
		rn.cancelRestore = cancel
		rn.rmu.Unlock()

		err := t.Restore(rctx, rn.adm)

		rn.rmu.Lock()
		rn.cancelRestore = nil
		revoked := rn.revoking
		rn.rmu.Unlock()
		cancel()
		if err != nil {
			if revoked || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("runner: %w", err)
		}
		delete(rn.pending, n)
		rn.tasks[n] = t
		ready = append(ready, n)
		rn.r.cfg.logger.Info("task running", "partition", n)
	}
	return nil
}

func (rn *run) topicPartitions(ns ...int32) map[string][]int32 {
	m := make(map[string][]int32, len(rn.r.cfg.inputs))
	for _, t := range rn.r.cfg.inputs {
		m[t] = slices.Clone(ns)
	}
	return m
}

// onAssigned pauses the new partitions and fences their tasks' previous
// owners. The fence runs here, before the client fetches the group's
// committed offsets (require-stable), so those offsets are final. Restores
// run in the main loop.
func (rn *run) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	c := &rn.r.cfg
	cl.PauseFetchPartitions(assigned)

	held := map[int32]int{}
	for _, ps := range assigned {
		for _, p := range ps {
			held[p]++
		}
	}
	var ns []int32
	for n, k := range held {
		if n >= rn.partitions {
			rn.setFatal(flechtwerk.Errorf(flechtwerk.CodePartitionMismatch, "topic "+strings.Join(c.inputs, ","),
				"assigned partition %d, but the input topics had %d partitions at startup and the changelog has as many; adding partitions to inputs needs a state migration", n, rn.partitions))
			return
		}
		if k != len(c.inputs) {
			rn.setFatal(fmt.Errorf("runner: partition %d assigned for %d of %d input topics; the group must use range assignment over co-partitioned inputs (is another application using group %q?)", n, k, len(c.inputs), c.appID))
			return
		}
		ns = append(ns, n)
	}
	slices.Sort(ns)

	type started struct {
		n   int32
		t   *task.Task
		err error
	}
	out := make(chan started, len(ns))
	for _, n := range ns {
		go func() {
			t, err := task.Start(ctx, task.Config{
				ApplicationID:      c.appID,
				Partition:          n,
				InputTopics:        c.inputs,
				TopicIDs:           rn.topicIDs,
				Changelog:          rn.changelog,
				StateDir:           c.stateDir,
				TransactionTimeout: c.txnTimeout,
				KafkaOpts:          rn.base,
				Logger:             c.logger,
			}, rn.r.proc)
			out <- started{n, t, err}
		}()
	}
	var errs []error
	rn.mu.Lock()
	for range ns {
		s := <-out
		if s.err != nil {
			errs = append(errs, s.err)
			continue
		}
		if old := rn.pending[s.n]; old != nil {
			old.Close()
		}
		rn.pending[s.n] = s.t
	}
	rn.mu.Unlock()
	if len(errs) > 0 {
		if ctx.Err() != nil {
			return // the client is closing (Run is stopping): not a failure
		}
		rn.setFatal(fmt.Errorf("runner: starting tasks: %w", errors.Join(errs...)))
		return
	}
	c.logger.Info("partitions assigned", "partitions", ns)
	rn.poke()
}

// onRevoked tears every task down, after the in-flight batch (rebalances are
// blocked while one runs) and after cutting a restore short.
func (rn *run) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	rn.rmu.Lock()
	rn.revoking = true
	if rn.cancelRestore != nil {
		rn.cancelRestore()
	}
	rn.rmu.Unlock()

	rn.teardown()

	rn.rmu.Lock()
	rn.revoking = false
	rn.rmu.Unlock()
	rn.r.cfg.logger.Info("partitions revoked", "revoked", revoked)
}

func (rn *run) teardown() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	var errs []error
	for n, t := range rn.tasks {
		errs = append(errs, t.Close())
		delete(rn.tasks, n)
	}
	for n, t := range rn.pending {
		errs = append(errs, t.Close())
		delete(rn.pending, n)
	}
	if err := errors.Join(errs...); err != nil {
		rn.setFatal(fmt.Errorf("runner: closing tasks: %w", err))
	}
}
