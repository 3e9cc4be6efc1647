package extractor

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
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/group"
	"github.com/flechtwerk/flechtwerk/internal/topics"
	"github.com/flechtwerk/flechtwerk/store"
)

// ErrPageTimeout means a page stayed open longer than PageTimeout. The page
// was aborted (nothing of it is visible, its cursor did not move) and Run
// ended; the config is polled again from its last committed cursor when the
// extractor runs again.
var ErrPageTimeout = errors.New("extractor: page exceeded PageTimeout")

// PollError is a failed poll: the poll function returned an error or
// panicked (Err is then a *PanicError with the stack), or its page exceeded
// PageTimeout, or its cursor could not be encoded or decoded (or its codec
// panicked). The open page was aborted: nothing of it is visible and the
// config's cursor did not move, so the next run polls the config again from
// its last committed cursor. Pages the poll committed before the error stay
// committed.
type PollError struct {
	// Key is the config key.
	Key []byte
	Err error
}

func (e *PollError) Error() string {
	return fmt.Sprintf("extractor: poll of config %q failed; open page aborted, cursor not moved: %v", e.Key, e.Err)
}

func (e *PollError) Unwrap() error { return e.Err }

// Runner runs one extractor. Build it with NewRunner; Run it once.
type Runner struct {
	cfg     cfg
	ex      Poller
	started atomic.Bool

	mu  sync.Mutex
	cur *run // the running Run, for Wake
}

// Wake polls the config of key now, ahead of its PollInterval, for sources
// that push a notice of new data (a webhook, a queue message). A poll of the
// config that is running when Wake is called is followed by another one at
// once. The woken poll waits for a concurrency slot like any due poll, and
// the next regular poll comes an interval after it started.
//
// Wake reports whether the poll will run on this instance: false when Run
// is not running, when key is not a live config, when the config is
// suspended (see Suspended), or when another instance holds its ownership
// token (then wake that instance, or let the interval poll it). Wake does
// not block and is safe for concurrent use.
func (r *Runner) Wake(key []byte) bool {
	r.mu.Lock()
	rn := r.cur
	r.mu.Unlock()
	if rn == nil {
		return false
	}
	return rn.wakeKey(key)
}

// ErrRunTwice is returned by a second call of Run on the same Runner.
var ErrRunTwice = errors.New("extractor: Run called twice; build a new Runner with NewRunner")

// NewRunner checks the configuration and returns a Runner. Every problem is
// reported at once as *flechtwerk.ConfigError values joined with
// errors.Join; NewRunner does no I/O. Problems that need the cluster
// (missing config topics, unequal partition counts, the changelog) are
// reported by Run before anything is polled.
func NewRunner(ex Poller, opts ...RunnerOpt) (*Runner, error) {
	c := defaults()
	for _, o := range opts {
		o.apply(&c)
	}
	var errs []error
	if ex == nil {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "extractor", "extractor is nil"))
	} else if err := ex.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: c, ex: ex}, nil
}

// Changelog returns the cursor changelog topic of the runner's application.
func (r *Runner) Changelog() string { return changelog.Topic(r.cfg.appID) }

// Run polls until ctx is canceled (then it stops gracefully and returns nil)
// or an error ends it. See the package documentation.
func (r *Runner) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	c := &r.cfg
	rn := &run{r: r, wake: make(chan struct{}, 1), tokens: map[int32]*token{}, sched: map[string]*schedule{},
		sem: make(chan struct{}, c.concurrency), changelog: changelog.Topic(c.appID)}
	rn.base = append([]kgo.Opt{kgo.SeedBrokers(c.brokers...), kgo.WithLogger(kslog.New(c.logger))}, c.kafkaOpts...)

	admCl, err := kgo.NewClient(rn.base...)
	if err != nil {
		return fmt.Errorf("extractor: admin client: %w", err)
	}
	defer admCl.Close()
	rn.adm = kadm.NewClient(admCl)

	_, n, err := topics.Describe(ctx, rn.adm, "config", c.topics)
	if err != nil {
		return err
	}
	rn.n = n
	if err := changelog.Ensure(ctx, rn.adm, rn.changelog, n, c.replication); err != nil {
		return err
	}
	tableOpts := []configtopic.Opt{
		configtopic.SeedBrokers(c.brokers...),
		configtopic.Topics(c.topics...),
		configtopic.Codec(r.ex.decodeConfig()),
		configtopic.WithKafkaOpts(c.kafkaOpts...),
		configtopic.WithLogger(c.logger),
	}
	if e := r.ex.enrichConfig(); e != nil {
		tableOpts = append(tableOpts, configtopic.Enrich(e))
	}
	table, err := configtopic.New[any](tableOpts...)
	if err != nil {
		return err
	}
	rn.table = table
	r.mu.Lock()
	r.cur = rn
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.cur = nil
		r.mu.Unlock()
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
		consumerOpts := group.Opts(rn.clientOpts(), c.consumerOpts, group.Member{
			Group:          c.appID,
			Topics:         c.topics,
			SessionTimeout: c.session,
			OnAssigned:     rn.onAssigned,
			OnRevoked:      rn.onRevoked,
		})
		consumer, err = kgo.NewClient(consumerOpts...)
		if err != nil {
			rn.setFatal(fmt.Errorf("extractor: group member: %w", err))
		} else {
			// The group only hands out ownership; the config records
			// are read in full by the table.
			consumer.PauseFetchTopics(c.topics...)
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

// schedule is the poll schedule of one config key. Every live config has
// one, whether its token is held here or not; a tombstoned config keeps
// its schedule until its cursor is deleted (DeleteCursors).
type schedule struct {
	running bool      // a poll or a cursor delete of the key runs
	due     time.Time // the next poll starts at or after due; zero: at once
	woken   time.Time // when Wake was called; zero: not woken
}

// run is the state of one Run.
type run struct {
	r         *Runner
	adm       *kadm.Client
	base      []kgo.Opt
	changelog string
	n         int32
	table     *configtopic.Table[any]
	ctx       context.Context
	cancel    context.CancelFunc
	sem       chan struct{}
	wg        sync.WaitGroup

	// mu guards tokens and sched.
	mu     sync.Mutex
	tokens map[int32]*token
	sched  map[string]*schedule

	fatalMu sync.Mutex
	fatal   error
	wake    chan struct{}
}

func (rn *run) clientOpts() []kgo.Opt { return slices.Clone(rn.base) }

func (rn *run) setFatal(err error) {
	rn.fatalMu.Lock()
	if rn.fatal == nil {
		rn.fatal = err
	}
	rn.fatalMu.Unlock()
	rn.cancel()
}

func (rn *run) fatalErr() error {
	rn.fatalMu.Lock()
	defer rn.fatalMu.Unlock()
	return rn.fatal
}

func (rn *run) poke() {
	select {
	case rn.wake <- struct{}{}:
	default:
	}
}

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

// job is a due poll or cursor delete.
type job struct {
	key string
	e   configtopic.Entry[any]
	tk  *token
	st  *schedule
	due time.Time
	del bool // delete the cursor of a tombstoned config
}

// startDue starts the polls of the live, unsuspended configs of ready
// tokens that are due (their interval passed, or Wake was called) and not
// running, oldest due first, while concurrency slots are free; and the
// cursor deletes of tombstoned configs (DeleteCursors), before any poll.
// Due polls left without a slot keep their due time, so they go first
// once a finishing poll frees a slot and wakes the loop. It returns when
// the next config falls due.
func (rn *run) startDue() time.Time {
	c := &rn.r.cfg
	now := time.Now()
	next := now.Add(c.interval)
	live := map[string]bool{}
	var jobs []job
	bad := false
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.table.Range(func(e configtopic.Entry[any]) bool {
		key := string(e.Key)
		live[key] = true
		st := rn.sched[key]
		if st == nil {
			st = &schedule{}
			rn.sched[key] = st
		}
		susp, err := Suspended(e.Record)
		if err != nil {
			rn.setFatal(err)
			bad = true
			return true // every live key is seen: none looks tombstoned
		}
		if susp || st.running {
			return true
		}
		tk := rn.tokens[Token(e.Key, rn.n)]
		if tk == nil || !tk.ready.Load() || tk.ctx.Err() != nil {
			return true
		}
		due := st.due
		if !st.woken.IsZero() && st.woken.Before(due) {
			due = st.woken
		}
		if now.Before(due) {
			if due.Before(next) {
				next = due
			}
			return true
		}
		jobs = append(jobs, job{key: key, e: e, tk: tk, st: st, due: due})
		return true
	})
	if bad {
		return next // Run ends
	}
	for key, st := range rn.sched {
		if live[key] || st.running {
			continue
		}
		tk := rn.tokens[Token([]byte(key), rn.n)]
		if c.tombstoned == KeepCursors || tk == nil || tk.ctx.Err() != nil {
			// A config added again starts at once. A token held
			// elsewhere is swept by its owner (token.init).
			delete(rn.sched, key)
			continue
		}
		if tk.ready.Load() {
			jobs = append(jobs, job{key: key, tk: tk, st: st, del: true}) // zero due: first
		}
	}
	slices.SortFunc(jobs, func(a, b job) int {
		if d := a.due.Compare(b.due); d != 0 {
			return d
		}
		return strings.Compare(a.key, b.key)
	})
	for _, j := range jobs {
		select {
		case rn.sem <- struct{}{}:
		default:
			return next // a finishing poll wakes the loop
		}
		j.st.running = true
		j.tk.polls.Add(1)
		rn.wg.Add(1)
		if j.del {
			go rn.dropCursor(j.tk, j.key, j.st)
			continue
		}
		j.st.due, j.st.woken = now.Add(c.interval), time.Time{}
		go rn.poll(j.tk, j.e, j.st)
	}
	return next
}

// wakeKey makes key due at once. It reports whether this instance holds
// the key's token and the key is a live, unsuspended config.
func (rn *run) wakeKey(key []byte) bool {
	e, ok := rn.table.Get(key)
	if !ok {
		return false
	}
	if susp, err := Suspended(e.Record); susp || err != nil {
		return false
	}
	rn.mu.Lock()
	st := rn.sched[string(key)]
	if st == nil {
		st = &schedule{}
		rn.sched[string(key)] = st
	}
	if st.woken.IsZero() {
		st.woken = time.Now()
	}
	held := rn.tokens[Token(key, rn.n)] != nil
	rn.mu.Unlock()
	rn.poke()
	return held
}

// dropCursor deletes the cursor of the tombstoned config key: a changelog
// tombstone in a transaction of the token, like a page's cursor. A key
// without a cursor writes nothing.
func (rn *run) dropCursor(tk *token, key string, st *schedule) {
	done := false
	defer func() {
		<-rn.sem
		rn.mu.Lock()
		st.running = false
		if done && rn.sched[key] == st {
			delete(rn.sched, key)
		}
		rn.mu.Unlock()
		tk.polls.Done()
		rn.wg.Done()
		rn.poke()
	}()
	if err := tk.commit(tk.ctx, rn, []byte(key), nil, &store.Write{Key: []byte(key), Delete: true}); err != nil {
		if tk.ctx.Err() == nil {
			rn.setFatal(fmt.Errorf("extractor: deleting the cursor of tombstoned config %q (token %d): %w", key, tk.n, err))
		}
		return
	}
	done = true
	rn.r.cfg.logger.Debug("cursor of tombstoned config deleted", "config", key, "token", tk.n)
}

func (rn *run) poll(tk *token, e configtopic.Entry[any], st *schedule) {
	defer func() {
		<-rn.sem
		rn.mu.Lock()
		st.running = false
		rn.mu.Unlock()
		tk.polls.Done()
		rn.wg.Done()
		rn.poke()
	}()
	if err := rn.pollOnce(tk, e); err != nil {
		rn.setFatal(err)
	}
}

// pollOnce runs the poll function once for one config and commits its
// trailing page.
func (rn *run) pollOnce(tk *token, e configtopic.Entry[any]) error {
	c := &rn.r.cfg
	pctx, cancel := context.WithCancelCause(tk.ctx)
	defer cancel(nil)
	p := &page{rn: rn, tk: tk, key: e.Key, ctx: pctx}
	p.timer = time.AfterFunc(c.pageTimeout, func() {
		cancel(fmt.Errorf("%w (%v): the page was aborted; commit smaller pages or raise PageTimeout (below TransactionTimeout %v)",
			ErrPageTimeout, c.pageTimeout, c.txnTimeout))
	})
	p.armed = true
	defer p.timer.Stop()

	cursor, found, err := tk.cursor(e.Key)
	if err != nil {
		if tk.ctx.Err() != nil {
			return nil
		}
		return &PollError{Key: e.Key, Err: fmt.Errorf("reading cursor: %w", err)}
	}
	began := time.Now()
	perr := callPoll(rn.r.ex, pctx, e, cursor, found, p)
	p.timer.Stop()
	p.armed = false
	if pe := (*PanicError)(nil); errors.As(perr, &pe) {
		// A bug, not a canceled poll: reported even while stopping.
		return &PollError{Key: e.Key, Err: perr}
	}

	if cause := context.Cause(pctx); errors.Is(cause, ErrPageTimeout) {
		return &PollError{Key: e.Key, Err: cause}
	}
	if tk.ctx.Err() != nil {
		// The token moved or Run is stopping: the open page is
		// dropped (aborted) and the new owner resumes from the last
		// committed cursor.
		c.logger.Debug("poll canceled; open page aborted", "config", string(e.Key), "token", tk.n, "records", len(p.recs))
		return nil
	}
	if p.err != nil {
		return p.err
	}
	if perr != nil {
		return &PollError{Key: e.Key, Err: perr}
	}
	if len(p.recs) > 0 {
		if err := p.commitNow(pctx, nil, false); err != nil {
			if tk.ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	c.logger.Debug("poll done", "config", string(e.Key), "token", tk.n, "pages", p.pages, "took", time.Since(began))
	return nil
}

// callPoll runs the poll function (and the cursor codec), recovering a
// panic into a *PanicError.
func callPoll(ex Poller, ctx context.Context, e configtopic.Entry[any], cursor []byte, found bool, p *page) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = newPanicError(v)
		}
	}()
	return ex.poll(ctx, e, cursor, found, p)
}

// page is the open page of one poll: records buffered until the page
// closes. Buffering keeps the token's producer free for the pages of its
// other configs: a page's transaction is open only while it commits.
type page struct {
	rn    *run
	tk    *token
	key   []byte
	ctx   context.Context
	timer *time.Timer
	armed bool // timer runs: the page is open and the poll has not returned
	recs  []*kgo.Record
	pages int
	err   error
}

func (p *page) add(r *kgo.Record) { p.recs = append(p.recs, r) }

func (p *page) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// commit closes the page with a new cursor (Emitter.Commit).
func (p *page) commit(ctx context.Context, cursor []byte, hasCursor bool) error {
	if p.err != nil {
		return p.err
	}
	if !p.armed {
		p.fail(fmt.Errorf("extractor: config %q: Commit called after the poll function returned", p.key))
		return p.err
	}
	if !p.timer.Stop() {
		// The page timed out: its context carries the cause.
		<-p.ctx.Done()
	}
	if err := p.commitNow(ctx, cursor, hasCursor); err != nil {
		return err
	}
	p.timer.Reset(p.rn.r.cfg.pageTimeout)
	return nil
}

func (p *page) commitNow(ctx context.Context, cursor []byte, hasCursor bool) error {
	if cause := context.Cause(p.ctx); cause != nil {
		if errors.Is(cause, ErrPageTimeout) {
			p.fail(&PollError{Key: p.key, Err: cause})
		} else {
			p.fail(fmt.Errorf("extractor: config %q: page aborted: %w", p.key, cause))
		}
		return p.err
	}
	var w *store.Write
	if hasCursor {
		w = &store.Write{Key: p.key, Value: cursor}
	}
	if err := p.tk.commit(ctx, p.rn, p.key, p.recs, w); err != nil {
		p.fail(fmt.Errorf("extractor: committing page of config %q (token %d): %w", p.key, p.tk.n, err))
		return p.err
	}
	p.recs = nil
	p.pages++
	return nil
}

// onAssigned creates a token per held partition number and starts its
// fence and restore; polls start once it is ready.
func (rn *run) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c := &rn.r.cfg
	held := map[int32]int{}
	for _, ps := range assigned {
		for _, p := range ps {
			held[p]++
		}
	}
	var ns []int32
	for n, k := range held {
		if k != len(c.topics) {
			rn.setFatal(fmt.Errorf("extractor: partition %d assigned for %d of %d config topics; the group must use range assignment over co-partitioned config topics (is another application using group %q?)", n, k, len(c.topics), c.appID))
			return
		}
		if n >= rn.n {
			rn.setFatal(fmt.Errorf("extractor: config topics grew from %d partitions to more than %d; the cursor changelog needs a migration (restart with a new application id)", rn.n, n))
			return
		}
		ns = append(ns, n)
	}
	slices.Sort(ns)
	rn.mu.Lock()
	for _, n := range ns {
		if rn.tokens[n] != nil {
			continue
		}
		tk := newToken(rn.ctx, c.appID, n)
		rn.tokens[n] = tk
		rn.wg.Add(1)
		go func() {
			defer rn.wg.Done()
			defer close(tk.initDone)
			if err := tk.init(rn); err != nil && tk.ctx.Err() == nil {
				rn.setFatal(fmt.Errorf("extractor: %w", err))
			}
			rn.poke()
		}()
	}
	rn.mu.Unlock()
	c.logger.Info("extractor tokens assigned", "tokens", ns)
}

// onRevoked tears down the tokens of the revoked partitions: their polls
// are canceled and their open pages aborted before the callback returns.
func (rn *run) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ns := map[int32]bool{}
	for _, ps := range revoked {
		for _, p := range ps {
			ns[p] = true
		}
	}
	rn.teardown(rn.takeTokens(ns))
	rn.r.cfg.logger.Info("extractor tokens revoked", "revoked", revoked)
}

// takeTokens removes the tokens in ns (all when ns is nil) from the run.
func (rn *run) takeTokens(ns map[int32]bool) []*token {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	var out []*token
	for n, tk := range rn.tokens {
		if ns == nil || ns[n] {
			out = append(out, tk)
			delete(rn.tokens, n)
		}
	}
	return out
}

func (rn *run) teardown(tks []*token) {
	for _, tk := range tks {
		tk.cancel() // cancel every poll first, then wait for each
	}
	var errs []error
	for _, tk := range tks {
		if err := tk.teardown(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		rn.setFatal(fmt.Errorf("extractor: closing tokens: %w", err))
	}
}
