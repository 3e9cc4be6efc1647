package standby

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/restore"
	"github.com/flechtwerk/flechtwerk/store"
)

// DefaultSyncEvery is how often a tailing standby syncs its store to disk
// when Config.SyncEvery is zero.
const DefaultSyncEvery = time.Second

// DefaultRefreshEvery is how often a standby's checkpoint time is
// refreshed when Config.RefreshEvery is zero.
const DefaultRefreshEvery = time.Minute

// abortCheck is added to the owner's transaction timeout when a restore's
// checkpoint time is moved back: the broker looks for timed-out
// transactions periodically (transaction.abort.timed.out.transaction.cleanup.interval.ms,
// 10s by default), so a transaction may stay open a little longer.
const abortCheck = time.Minute

// Config describes the standby replicas of one application's transformer.
type Config struct {
	ApplicationID string
	// Changelog is the default store's changelog topic; partition N is
	// the changelog of task N. Empty: the tasks keep no default store
	// (only Stores: named stores or timers).
	Changelog string
	// StateDir is the root of the stores: task N's store is
	// store.Dir(StateDir, ApplicationID, N).
	StateDir string
	// Admin lists offsets and describes the changelog (restores, Lag).
	Admin *kadm.Client
	// KafkaOpts are the options of every client (brokers, TLS, SASL).
	KafkaOpts []kgo.Opt
	// TransactionTimeout is the transaction timeout of the tasks' owners:
	// how long a transaction of an owner may stay open (see the package
	// doc, "Checkpoint time").
	TransactionTimeout time.Duration
	// SyncEvery bounds how long the batches a standby applied stay
	// unsynced (a crash loses at most that much, which the next restore
	// replays). Default (zero) DefaultSyncEvery.
	SyncEvery time.Duration
	// RefreshEvery is how often the Manager checks whether its standbys
	// are at the end of their partitions, to move the time of their
	// checkpoints forward (see the package doc, "Checkpoint time").
	// Default (zero) DefaultRefreshEvery.
	RefreshEvery time.Duration
	// Stores are the other stores of every task, beside the default one
	// above (the named stores and the timer store): a standby keeps each
	// with its own changelog topic and checkpoint, restored and tailed
	// like the default store.
	Stores []Store
	// RestoreContext, when set, wraps the context of each restore of a
	// standby, e.g. to report its progress (changelog.WithProgress). A
	// task with several stores has a restore per store.
	RestoreContext func(ctx context.Context, partition int32) context.Context
	// OnError receives the first error of a standby; the Manager applies
	// nothing after it. Required.
	OnError func(error)
	Logger  *slog.Logger
}

// Store is a named store of the tasks (Config.Stores).
type Store struct {
	// Name is the store's name: task N's store is
	// store.NamedDir(StateDir, ApplicationID, N, Name).
	Name string
	// Topic is the store's changelog topic; partition N is task N's.
	Topic string
	// Timers: the store is a timer store (store.Options.Timers).
	Timers bool
}

// Manager runs the standby replicas of one instance. Build it with New.
type Manager struct {
	cfg    Config
	cl     *kgo.Client
	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the tail loop and the restores

	failed   atomic.Bool
	failOnce sync.Once

	// stores are the stores of a task: 0 the default one, then
	// Config.Stores; byTopic maps a changelog topic to its store.
	stores  []Store
	byTopic map[string]int

	// mu guards reps and closed, and every replica's fields; the tail
	// loop holds it while it applies a poll's records.
	mu     sync.Mutex
	reps   map[int32][]*replica // per task, one per store
	closed bool
}

// replica is one store of a standby task.
type replica struct {
	n     int32
	s     int    // the index of its store in Manager.stores
	topic string // the store's changelog topic
	// st is set by the replica's first restore (under mu) and closed by
	// whoever removed the replica, after its restore ended.
	st     *store.Store
	cancel context.CancelFunc // cuts the running restore short
	done   chan struct{}      // closed when the running restore ended
	// tailing is set once a restore brought the store up to the last
	// stable offset and the partition was added to the client at next.
	tailing bool
	topicID [16]byte
	next    int64
	synced  time.Time
	// cpTime is the Time of the checkpoint at next; retention the
	// changelog's delete.retention.ms.
	cpTime    time.Time
	retention time.Duration
}

// New returns a Manager with no standby tasks. It starts the client and
// the loop that tails the changelog partitions; Close stops them.
func New(cfg Config) (*Manager, error) {
	if cfg.OnError == nil {
		return nil, errors.New("standby: Config.OnError is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SyncEvery <= 0 {
		cfg.SyncEvery = DefaultSyncEvery
	}
	if cfg.RefreshEvery <= 0 {
		cfg.RefreshEvery = DefaultRefreshEvery
	}
	opts := append(slices.Clone(cfg.KafkaOpts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Markers move the position past them (else a standby of an
		// idle partition stays one offset behind every commit).
		kgo.KeepControlRecords(),
		// A position out of range means records below it were deleted:
		// the standby is wiped and restored, never silently reset.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	var stores []Store
	if cfg.Changelog != "" {
		stores = append(stores, Store{Topic: cfg.Changelog})
	} else if len(cfg.Stores) == 0 {
		return nil, errors.New("standby: no store: a Changelog or Stores is required")
	}
	stores = append(stores, cfg.Stores...)
	byTopic := make(map[string]int, len(stores))
	names := map[string]bool{}
	for i, s := range stores {
		named := i > 0 || cfg.Changelog == ""
		if named && (!store.ValidName(s.Name) || names[s.Name] || s.Topic == "") {
			return nil, fmt.Errorf("standby: store %q (topic %q): a valid name used once and a topic are required", s.Name, s.Topic)
		}
		if named && s.Timers != (s.Name == changelog.TimersName) {
			// Opened with the other setting, a store is wiped.
			return nil, fmt.Errorf("standby: store %q: the timer store is the one named %q, and only it", s.Name, changelog.TimersName)
		}
		if _, dup := byTopic[s.Topic]; dup {
			return nil, fmt.Errorf("standby: changelog topic %q of two stores", s.Topic)
		}
		names[s.Name], byTopic[s.Topic] = true, i
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("standby: client for %s: %w", stores[0].Topic, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{cfg: cfg, cl: cl, ctx: ctx, cancel: cancel, stores: stores, byTopic: byTopic, reps: map[int32][]*replica{}}
	m.wg.Add(2)
	go m.tail()
	go m.refresh()
	return m, nil
}

// Set makes tasks the standby tasks of this instance: a task not held
// yet gets its stores opened and restored (on goroutines of the Manager,
// one per store; Set does not wait) and is then tailed; a held task not
// in tasks is stopped and its stores closed (Set waits for that). The
// caller must not list a task this instance runs.
func (m *Manager) Set(tasks []int32) error {
	want := make(map[int32]bool, len(tasks))
	for _, n := range tasks {
		want[n] = true
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	var gone []*replica
	for n := range m.reps {
		if !want[n] {
			gone = append(gone, m.removeLocked(n)...)
		}
	}
	var added []int32
	for n := range want {
		if m.reps[n] == nil {
			rs := make([]*replica, len(m.stores))
			for i, s := range m.stores {
				rs[i] = &replica{n: n, s: i, topic: s.Topic}
			}
			m.reps[n] = rs
			for _, r := range rs {
				m.restoreLocked(r, false)
			}
			added = append(added, n)
		}
	}
	m.mu.Unlock()
	if len(added) > 0 || len(gone) > 0 {
		slices.Sort(added)
		m.cfg.Logger.Info("standby tasks set", "tasks", slices.Sorted(maps.Keys(want)), "added", added, "stopped", len(gone))
	}
	var errs []error
	for _, r := range gone {
		_, err := m.close(r)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Release stops the standby of task n, if this instance holds one, and
// closes its stores, releasing their locks: when Release returns, the
// task can open them (warm). It is a no-op when n is not a standby task
// here.
func (m *Manager) Release(n int32) error {
	m.mu.Lock()
	rs := m.removeLocked(n)
	m.mu.Unlock()
	var errs []error
	for _, r := range rs {
		next, err := m.close(r)
		if err == nil {
			m.cfg.Logger.Info("standby released", "partition", n, "changelog", r.topic, "next", next)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeLocked takes the replicas of task n out of the Manager: their
// partitions are no longer fetched, and their running restores are told
// to stop. The caller holds mu and then calls close for each.
func (m *Manager) removeLocked(n int32) []*replica {
	rs := m.reps[n]
	delete(m.reps, n)
	for _, r := range rs {
		if r.tailing {
			r.tailing = false
			m.cl.RemoveConsumePartitions(map[string][]int32{r.topic: {r.n}})
		}
		r.cancel()
	}
	return rs
}

// close waits for r's restore and closes its store, returning the offset
// of its checkpoint (-1: none). r was removed.
func (m *Manager) close(r *replica) (int64, error) {
	m.mu.Lock()
	done := r.done
	m.mu.Unlock()
	<-done
	m.mu.Lock()
	st := r.st
	r.st = nil
	m.mu.Unlock()
	next := int64(-1)
	if st != nil {
		if n, ok := st.Next(); ok {
			next = n
		}
	}
	if err := st.Close(); err != nil {
		return next, fmt.Errorf("standby: closing the store of %s partition %d: %w", r.topic, r.n, err)
	}
	return next, nil
}

// restoreLocked starts a restore of r; wipe restores it in full. The
// caller holds mu; r is not tailing.
func (m *Manager) restoreLocked(r *replica, wipe bool) {
	ctx, cancel := context.WithCancel(m.ctx)
	r.cancel, r.done = cancel, make(chan struct{})
	done := r.done
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(done)
		defer cancel()
		if err := m.restore(ctx, r, wipe); err != nil && ctx.Err() == nil {
			m.fail(err)
		}
	}()
}

// restore opens r's store (the first time), brings it up to the last
// stable offset and starts tailing it there.
func (m *Manager) restore(ctx context.Context, r *replica, wipe bool) error {
	c := &m.cfg
	topic := r.topic
	m.mu.Lock()
	st := r.st
	m.mu.Unlock()
	if st == nil {
		dir := store.Dir(c.StateDir, c.ApplicationID, r.n)
		if def := m.stores[r.s]; def.Name != "" {
			dir = store.NamedDir(c.StateDir, c.ApplicationID, r.n, def.Name)
		}
		var err error
		st, err = store.Open(ctx, dir,
			store.Options{ApplicationID: c.ApplicationID, Logger: c.Logger, Timers: m.stores[r.s].Timers})
		if err != nil {
			return fmt.Errorf("standby: opening the store of %s partition %d: %w", topic, r.n, err)
		}
		m.mu.Lock()
		r.st = st
		m.mu.Unlock()
	}
	if wipe {
		// No checkpoint: Recover restores from the log start.
		if err := st.Reset([16]byte{}); err != nil {
			return fmt.Errorf("standby: wiping the store of %s partition %d: %w", topic, r.n, err)
		}
	}
	began := time.Now()
	rctx := ctx
	if c.RestoreContext != nil {
		rctx = c.RestoreContext(ctx, r.n)
	}
	res, err := m.recover(rctx, topic, r.n, st)
	if err != nil {
		return fmt.Errorf("standby: restoring %s partition %d: %w", topic, r.n, err)
	}
	// The owner is not fenced: a transaction of its may be open with
	// records above the checkpoint written before the listing.
	cp, _ := st.Checkpoint()
	if bound := began.Add(-c.TransactionTimeout - abortCheck); cp.Time.After(bound) {
		cp.Time = bound
		if err := st.ApplyCheckpoint(nil, cp); err != nil {
			return fmt.Errorf("standby: restoring %s partition %d: %w", topic, r.n, err)
		}
	}
	_, retention, err := restore.Describe(ctx, c.Admin, topic)
	if err != nil {
		return fmt.Errorf("standby: restoring %s partition %d: %w", topic, r.n, err)
	}
	c.Logger.Info("standby restored", "partition", r.n, "changelog", topic,
		"records", res.Records, "from", res.From, "to", res.To, "full", res.Full, "reason", res.Reason,
		"took", time.Since(began))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.replica(r.n, r.s) != r || ctx.Err() != nil {
		return nil // released meanwhile; whoever removed it closes the store
	}
	r.tailing, r.topicID, r.next, r.synced = true, cp.TopicID, cp.Next, time.Now()
	r.cpTime, r.retention = cp.Time, retention
	m.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {r.n: kgo.NewOffset().At(cp.Next)}})
	return nil
}

// replica returns the replica of store s of task n, nil if none. The
// caller holds mu.
func (m *Manager) replica(n int32, s int) *replica {
	if rs := m.reps[n]; s < len(rs) {
		return rs[s]
	}
	return nil
}

// recover brings st up to the last stable offset of partition n of topic. A
// checkpoint above the last stable offset (restore.ErrUnstable: the
// previous owner's last transaction, often this instance's own, is not
// complete yet) is tried again until the transaction completes, or ctx
// ends; it is not wiped.
func (m *Manager) recover(ctx context.Context, topic string, n int32, st *store.Store) (restore.Result, error) {
	c := &m.cfg
	backoff := 20 * time.Millisecond
	for logged := false; ; {
		res, err := restore.RecoverUnfenced(ctx, c.Admin, topic, n, st, c.KafkaOpts...)
		if !errors.Is(err, restore.ErrUnstable) {
			return res, err
		}
		if !logged {
			logged = true
			c.Logger.Info("standby waiting for the last stable offset to reach its checkpoint", "partition", n, "changelog", topic, "err", err)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// tail applies what the client fetches until Close.
func (m *Manager) tail() {
	defer m.wg.Done()
	for {
		fs := m.cl.PollFetches(m.ctx)
		if m.ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		m.mu.Lock()
		for _, f := range fs {
			for _, t := range f.Topics {
				s, ok := m.byTopic[t.Topic]
				if !ok {
					continue
				}
				for i := range t.Partitions {
					m.applyLocked(s, t.TopicID, &t.Partitions[i])
				}
			}
		}
		m.mu.Unlock()
	}
}

// applyLocked applies one partition's fetch to its standby's store: the
// data records (a nil value is a delete) and the checkpoint after the last
// record, data or marker, in one batch. The caller holds mu.
func (m *Manager) applyLocked(s int, topicID [16]byte, p *kgo.FetchPartition) {
	r := m.replica(p.Partition, s)
	if r == nil || !r.tailing || m.failed.Load() {
		return // released, restoring, or failed: dropped
	}
	topic := r.topic
	if p.Err != nil {
		if errors.Is(p.Err, kerr.OffsetOutOfRange) {
			m.rewindLocked(r, fmt.Sprintf("offset %d is out of range (records below it were deleted)", r.next))
			return
		}
		m.fail(fmt.Errorf("standby: tailing %s partition %d at offset %d: %w", topic, p.Partition, r.next, p.Err))
		return
	}
	if topicID != ([16]byte{}) && topicID != r.topicID {
		m.rewindLocked(r, fmt.Sprintf("the changelog's topic ID is %x, the store's %x (the topic was recreated)", topicID, r.topicID))
		return
	}
	var (
		writes []store.Write
		last   *kgo.Record
	)
	for _, rec := range p.Records {
		if rec.Offset < r.next {
			continue // of an earlier position of this partition
		}
		last = rec
		if rec.Attrs.IsControl() {
			continue
		}
		writes = append(writes, restore.Write(rec))
	}
	if last == nil {
		return
	}
	if !restore.Trusted(r.cpTime, r.retention, time.Now()) {
		// Records above the checkpoint were written after its time; a
		// tombstone among them older than delete.retention.ms may have
		// been cleaned away before this standby read it.
		m.rewindLocked(r, fmt.Sprintf("its checkpoint at offset %d is of %v, close to or beyond delete.retention.ms %v (deleted keys may have lost their tombstones)",
			r.next, r.cpTime.Format(time.RFC3339), r.retention))
		return
	}
	// Every record above the last one was written after it: its
	// timestamp bounds their write time from below.
	cp := store.Checkpoint{TopicID: r.topicID, Next: last.Offset + 1, Time: last.Timestamp}
	var err error
	if time.Since(r.synced) >= m.cfg.SyncEvery {
		err = r.st.ApplyCheckpoint(writes, cp)
		r.synced = time.Now()
	} else {
		err = r.st.ApplyRestored(writes, cp)
	}
	if err != nil {
		m.fail(fmt.Errorf("standby: applying %s partition %d at offset %d: %w", topic, p.Partition, r.next, err))
		return
	}
	r.next, r.cpTime = cp.Next, cp.Time
}

// refresh moves the checkpoint time of every standby at the end of its
// partition forward, every RefreshEvery until Close: when the partition's
// last stable offset equals its high watermark (no transaction open) and
// the standby's position is there, every record above the position is
// written after the listing began. Without it, the checkpoint of a
// partition without writes would age past delete.retention.ms, and a
// failover would restore in full.
func (m *Manager) refresh() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.RefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		if err := m.refreshOnce(m.ctx); err != nil && m.ctx.Err() == nil {
			// Housekeeping: a failed listing is tried again next time.
			m.cfg.Logger.Debug("standby: refreshing checkpoint times", "changelog", m.cfg.Changelog, "err", err)
		}
	}
}

func (m *Manager) refreshOnce(ctx context.Context) error {
	if len(m.Tasks()) == 0 || m.failed.Load() {
		return nil
	}
	listed := time.Now()
	topics := slices.Sorted(maps.Keys(m.byTopic))
	hwm, err := m.cfg.Admin.ListEndOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	lso, err := m.cfg.Admin.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.all() {
		topic := r.topic
		h, ok1 := hwm.Lookup(topic, r.n)
		l, ok2 := lso.Lookup(topic, r.n)
		if !r.tailing || !ok1 || !ok2 || h.Err != nil || l.Err != nil ||
			l.Offset != h.Offset || r.next < h.Offset || !listed.After(r.cpTime) {
			continue
		}
		cp := store.Checkpoint{TopicID: r.topicID, Next: r.next, Time: listed}
		if err := r.st.ApplyCheckpoint(nil, cp); err != nil {
			m.fail(fmt.Errorf("standby: checkpoint of %s partition %d at offset %d: %w", topic, r.n, r.next, err))
			return nil
		}
		r.cpTime, r.synced = listed, time.Now()
	}
	return nil
}

// all returns every replica of every task. The caller holds mu.
func (m *Manager) all() []*replica {
	var out []*replica
	for _, rs := range m.reps {
		out = append(out, rs...)
	}
	return out
}

// rewindLocked stops tailing r and restores it in full (r's store only:
// every store of a task has its own changelog and checkpoint). The caller
// holds mu.
func (m *Manager) rewindLocked(r *replica, reason string) {
	m.cfg.Logger.Warn("standby: wiping and restoring a standby", "partition", r.n, "changelog", r.topic, "reason", reason)
	r.tailing = false
	m.cl.RemoveConsumePartitions(map[string][]int32{r.topic: {r.n}})
	m.restoreLocked(r, true)
}

func (m *Manager) fail(err error) {
	m.failOnce.Do(func() {
		m.failed.Store(true)
		m.cfg.OnError(err)
	})
}

// Tasks returns the standby tasks, in order.
func (m *Manager) Tasks() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int32, 0, len(m.reps))
	for n := range m.reps {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Offsets returns, per standby task whose default store has a
// checkpoint (without a default store: any store), the sum over the
// task's stores of their checkpoints'
// changelog offsets (a store without a checkpoint counts 0): every
// committed record below a store's checkpoint is in that store, so a
// failover to this instance replays from there. With the default store
// alone, the sum is that store's offset. Summing keeps the comparison of
// members for one task monotone: more of any store's changelog applied,
// a larger sum.
func (m *Manager) Offsets() map[int32]int64 {
	all := m.StoreOffsets() // m.reps only under m.mu
	out := make(map[int32]int64, len(all))
	for n, offs := range all {
		if _, ok := offs[m.stores[0].Topic]; !ok && m.cfg.Changelog != "" {
			continue
		}
		var sum int64
		for _, next := range offs {
			sum += next
		}
		out[n] = sum
	}
	return out
}

// StoreOffsets returns, per standby task, the checkpoint offset of each
// of its stores that has one, by changelog topic.
func (m *Manager) StoreOffsets() map[int32]map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int32]map[string]int64, len(m.reps))
	for n, rs := range m.reps {
		for _, r := range rs {
			if r.st == nil {
				continue
			}
			if next, ok := r.st.Next(); ok {
				if out[n] == nil {
					out[n] = make(map[string]int64, len(rs))
				}
				out[n][r.topic] = next
			}
		}
	}
	return out
}

// Lag returns, per standby task, how many changelog offsets its stores
// are behind their partitions' last stable offsets (listed now), summed
// over the task's stores: what a failover to this instance would replay.
// A store without a checkpoint yet counts from offset 0. A task is
// missing when a listing of one of its stores failed.
func (m *Manager) Lag(ctx context.Context) (map[int32]int64, error) {
	offs := m.StoreOffsets()
	tasks := m.Tasks()
	if len(tasks) == 0 {
		return nil, nil
	}
	topics := slices.Sorted(maps.Keys(m.byTopic))
	lso, err := m.cfg.Admin.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("standby: last stable offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	out := make(map[int32]int64, len(tasks))
tasks:
	for _, n := range tasks {
		var sum int64
		for _, s := range m.stores {
			end, ok := lso.Lookup(s.Topic, n)
			if !ok || end.Err != nil {
				continue tasks
			}
			sum += max(end.Offset-offs[n][s.Topic], 0)
		}
		out[n] = sum
	}
	return out, nil
}

// Close stops every standby, closes their stores and the client, and
// waits for the Manager's goroutines. A second Close is a no-op.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	var reps []*replica
	for n := range m.reps {
		reps = append(reps, m.removeLocked(n)...)
	}
	m.mu.Unlock()
	m.cancel()
	var errs []error
	for _, r := range reps {
		_, err := m.close(r)
		errs = append(errs, err)
	}
	m.cl.Close()
	m.wg.Wait()
	return errors.Join(errs...)
}
