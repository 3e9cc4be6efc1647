package task

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/tracing"
	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/store"
)

// open is what a task processed and has not committed yet: the open
// transaction (nil while every batch since the last commit wrote nothing),
// the overlay of its state writes and the next offsets.
type open struct {
	txn *txn.Txn
	// stores hold the open transaction's last write per key of every
	// store (default, then named), timers its last operation per timer;
	// reads see them before the stores. They are applied to the stores
	// after the transaction committed and dropped when it aborts.
	stores []overlay
	timers *timerOverlay
	// streamAdvanced: the transaction advanced the stream time (written
	// to the timers changelog at its commit).
	streamAdvanced bool
	fired          int // timers fired in the transaction
	// offsets are the next offsets to consume per input topic, of every
	// batch added since the last commit.
	offsets map[string]int64
	since   time.Time // when the first batch since the last commit was added
	began   time.Time // when the transaction began
	// opening is how long the transaction took to open: Begin and
	// AddOffsetsToTxn, which waits for the previous transaction's markers.
	opening time.Duration
	records int   // input records in the transaction
	bytes   int64 // bytes of outputs and overlay
	outputs int
	// stats of every batch added since the last commit (inputs and
	// policy counts also of empty batches)
	stats Stats
	// trace of every batch added since the last commit (Config.TracerProvider
	// only)
	trace *traced
}

// newOpen returns an empty open transaction of a task with n stores.
func newOpen(n int) open {
	return open{stores: make([]overlay, n), timers: &timerOverlay{}}
}

// hasStoreWrites reports whether o writes a store (its changelog
// records).
func (o *open) hasStoreWrites() bool {
	for i := range o.stores {
		if len(o.stores[i].m) > 0 {
			return true
		}
	}
	return false
}

// maxSizeHint bounds the map size a transaction passes to the next one.
const maxSizeHint = 1 << 16

// next returns the empty open transaction that follows o, its overlays
// sized for as many keys as o's held (up to maxSizeHint).
func (o *open) next() open {
	n := newOpen(len(o.stores))
	for i := range o.stores {
		n.stores[i].hint = min(len(o.stores[i].m), maxSizeHint)
	}
	n.timers.hint = min(len(o.timers.m), maxSizeHint)
	return n
}

// Add joins a processed batch to what the task has not committed: a
// non-empty batch opens the transaction when none is open (its outputs go
// to the producer at once, without waiting for their results, and its
// state writes to the overlay); an empty one only advances the offsets.
// A transaction opens with the input offsets' partition joined
// (AddOffsetsToTxn), before its first record is sent; ctx bounds that.
// See Pending and CommitOpen.
func (t *Task) Add(ctx context.Context, b *Batch) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return fmt.Errorf("task %d: batch not added: %w", t.cfg.Partition, ErrClosed)
	}
	o := &t.open
	if o.offsets == nil {
		o.offsets = make(map[string]int64, len(b.Offsets))
	}
	if len(o.offsets) == 0 && len(b.Offsets) > 0 {
		o.since = time.Now()
	}
	for topic, off := range b.Offsets {
		if off > o.offsets[topic] {
			o.offsets[topic] = off
		}
	}
	o.stats.inputs = mergeInputs(o.stats.inputs, b.inputs)
	o.stats.invalid.add(b.invalid)
	if b.trace != nil {
		if o.trace == nil {
			o.trace = b.trace
		} else {
			o.trace.merge(b.trace)
		}
	}
	if b.Empty() {
		return nil
	}
	if o.txn == nil && t.cfg.Lane != nil {
		opening := time.Now()
		x, err := t.cfg.Lane.l.Join(ctx, t)
		if err != nil {
			return fmt.Errorf("task %d: %w", t.cfg.Partition, err)
		}
		o.txn, o.began = x, time.Now()
		o.opening = o.began.Sub(opening)
		if o.since.IsZero() {
			o.since = o.began
		}
	}
	if o.txn == nil {
		opening := time.Now()
		x, err := t.producer.Begin(ctx)
		if err != nil {
			return fmt.Errorf("task %d: %w", t.cfg.Partition, err)
		}
		if err := x.AddOffsets(ctx, t.cfg.ApplicationID); err != nil {
			// Nothing was sent; the transaction may be open on the
			// coordinator with only the offsets partition in it.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txn.AbortTimeout)
			defer cancel()
			return fmt.Errorf("task %d: %w", t.cfg.Partition, errors.Join(err, x.Abort(actx)))
		}
		o.txn, o.began = x, time.Now()
		o.opening = o.began.Sub(opening)
		if o.since.IsZero() {
			o.since = o.began
		}
	}
	o.records += b.Records
	o.outputs += len(b.outputs)
	for _, r := range b.outputs {
		n := int64(len(r.Key) + len(r.Value))
		o.bytes += n
		o.stats.outputs = addOutput(o.stats.outputs, r.Topic, n) // before Send: the producer owns r after it
		o.txn.Send(r)
	}
	for _, w := range b.writes {
		o.bytes += o.stores[0].put(w)
	}
	for _, w := range b.named {
		o.bytes += o.stores[w.Store+1].put(store.Write{Key: w.Key, Value: w.Value, Delete: w.Delete})
	}
	for _, op := range b.timers {
		o.timers.put(op)
	}
	if b.advanced {
		t.stream = b.stream
		o.streamAdvanced = true
	}
	o.fired += b.fired
	return nil
}

// Pending describes what the task has not committed.
type Pending struct {
	// Txn says whether a transaction is open; without one, the offsets
	// (if any) must be committed through the group member.
	Txn bool
	// Offsets are the next offsets to consume per input topic; nil when
	// nothing is pending. The map is the task's: do not modify it.
	Offsets map[string]int64
	// Since is when the first batch since the last commit was added.
	Since time.Time
	// Began is when the transaction began.
	Began time.Time
	// Records, Bytes and StateWrites size the open transaction: its input
	// records, the bytes of its outputs and of its overlay, and the keys
	// of its overlay.
	Records     int
	Bytes       int64
	StateWrites int
}

// Pending returns what the task has not committed.
func (t *Task) Pending() Pending {
	o := &t.open
	p := Pending{Txn: o.txn != nil, Since: o.since, Began: o.began, Records: o.records, Bytes: o.bytes}
	for i := range o.stores {
		p.StateWrites += len(o.stores[i].m)
	}
	p.StateWrites += len(o.timers.m)
	if len(o.offsets) > 0 || o.txn != nil {
		// A transaction of timers alone (Tick) has no offsets.
		p.Offsets = o.offsets
		if p.Offsets == nil {
			p.Offsets = map[string]int64{}
		}
	}
	return p
}

// OffsetsCommitted tells the task that its pending offsets were committed
// through the group member (no transaction was open), and returns the
// stats of what they committed.
func (t *Task) OffsetsCommitted() Stats {
	if t.open.txn != nil {
		return Stats{}
	}
	s := t.open.stats
	if len(t.open.offsets) > 0 {
		if t.position == nil {
			t.position = make(map[string]int64, len(t.open.offsets))
		}
		maps.Copy(t.position, t.open.offsets)
	}
	t.open = newOpen(len(t.stores))
	return s
}

// CommitOpen commits the open transaction: the overlay's changelog records
// (one per key written in the whole transaction, a delete as a tombstone)
// join the outputs already sent, every record's result is checked, the
// offsets join, and the transaction ends; then the overlay is applied to
// the store in one batch. On error the transaction was aborted (or its
// outcome is unknown; the broker aborts it when the next owner fences),
// nothing of it is visible, the overlay is dropped, and the task must not
// be used again. ctx's deadline bounds the commit (without one, the
// transaction timeout does); its cancellation does not cut the end off.
// It returns the stats of what the transaction committed (also when only
// the store update failed: the transaction committed).
func (t *Task) CommitOpen(ctx context.Context) (Stats, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(t.cfg.TransactionTimeout)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return Stats{}, fmt.Errorf("task %d: transaction not committed: %w", t.cfg.Partition, ErrClosed)
	}
	if t.cfg.Lane != nil {
		return Stats{}, fmt.Errorf("task %d: its transaction is its lane's; Prepare, then end the lane's", t.cfg.Partition)
	}
	c, err := t.prepare(ctx)
	if err != nil {
		return Stats{}, err
	}
	var offs *txn.Offsets
	if len(c.offsets) > 0 {
		offs = &txn.Offsets{
			Group:    t.cfg.ApplicationID,
			Next:     txn.Of(t.cfg.Partition, c.offsets),
			TopicIDs: t.cfg.TopicIDs,
			Metadata: t.cfg.OffsetsMetadata,
			Member:   t.cfg.Member,
		}
	}
	tm, err := c.o.txn.End(ctx, offs)
	if c.span != nil {
		tracing.End(c.span, err)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("task %d: %w", t.cfg.Partition, err)
	}
	return t.finish(c, tm)
}

// Prepared is a task's part of its lane's open transaction (shared-producer
// mode), sent and waiting for the lane's end: Prepare returns it,
// Committed applies it once the lane's transaction committed.
type Prepared struct {
	c *commit
	// Offsets are the next offsets of the task's input topics the
	// transaction must commit: what the task processed, or, when its
	// part holds only timers, its position (every transaction carries
	// the offsets of each task in it, so the group's generation check
	// fences it). Nil: the task is not in the transaction.
	Offsets map[string]int64
}

// Prepare sends the task's changelog records into its lane's open
// transaction, like the first half of CommitOpen, and returns its part
// (nil when the task has no open transaction: its pending offsets, if
// any, are committed through the group member or join the lane's
// transaction as they are). The lane's owner then ends the transaction
// with the offsets of every task in it, and calls Committed of each; on
// error, or when the transaction failed, the task must not be used again.
func (t *Task) Prepare(ctx context.Context) (*Prepared, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return nil, fmt.Errorf("task %d: transaction not committed: %w", t.cfg.Partition, ErrClosed)
	}
	if t.open.txn == nil {
		return nil, nil
	}
	c, err := t.prepare(ctx)
	if err != nil {
		return nil, err
	}
	offs := c.offsets
	if len(offs) == 0 {
		offs = t.position
	}
	if len(offs) == 0 {
		// Without offsets the group's generation would not fence the
		// transaction: it must not commit.
		return nil, fmt.Errorf("task %d: a transaction of timers alone, and no position to commit (SetPosition)", t.cfg.Partition)
	}
	return &Prepared{c: c, Offsets: offs}, nil
}

// Committed applies p, the task's part of its lane's transaction that
// committed, to the stores, like the end of CommitOpen.
func (t *Task) Committed(p *Prepared) (Stats, error) {
	if p.c.span != nil {
		tracing.End(p.c.span, nil)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return Stats{}, fmt.Errorf("task %d: transaction committed, store not updated (restored from the changelog on restart): %w", t.cfg.Partition, ErrClosed)
	}
	return t.finish(p.c, txn.Timing{})
}

// Aborted tells the task that the lane's transaction holding p did not
// commit (err says why): its commit span ends with the error. The task
// must not be used again.
func (t *Task) Aborted(p *Prepared, err error) {
	if p != nil && p.c.span != nil {
		tracing.End(p.c.span, err)
	}
}

// SetPosition tells the task the next offsets of its input topics it
// starts reading from (the group's committed offsets), which Prepare
// commits for a transaction of timers alone.
func (t *Task) SetPosition(next map[string]int64) {
	t.position = maps.Clone(next)
}

// commit is a transaction being committed: the open transaction it
// ends, the changelog records sent into it and the offsets it commits.
type commit struct {
	o       open
	all     []pendingWrites
	nwrites int
	writes  []store.Write
	offsets map[string]int64
	span    trace.Span
}

// pendingWrites are the changelog records of one store in a
// transaction.
type pendingWrites struct {
	st     *store.Store
	topic  string
	writes []store.Write
	recs   []*kgo.Record
	// prep: the timer store's writes, read against it (nil for the
	// other stores).
	prep *store.Prepared
}

// prepare sends the changelog records of the open transaction (one per
// key, of every store) and resets the open state; the caller holds mu
// shared and ends the transaction. On error the transaction was aborted.
func (t *Task) prepare(ctx context.Context) (*commit, error) {
	o := t.open
	if o.txn == nil {
		return nil, fmt.Errorf("task %d: no open transaction; commit the offsets through the group member", t.cfg.Partition)
	}
	// Timers set again at the due time they have change nothing: no
	// changelog record, no store write.
	var (
		tws  []store.Write
		prep *store.Prepared
	)
	if len(o.timers.m) > 0 || o.streamAdvanced {
		tws = o.timers.writes()
		if o.streamAdvanced {
			tws = append(tws, store.Write{Key: store.StreamTimeKey, Value: store.StreamTimeValue(t.stream)})
		}
		if t.timers != nil {
			p, err := t.timers.Prepare(tws)
			if err != nil {
				t.open = o.next()
				return nil, errors.Join(fmt.Errorf("task %d: transaction not committed: %w", t.cfg.Partition, err), t.abortOpen(ctx, o))
			}
			// A transaction must send a record: kgo ends none that
			// sent nothing, and its offsets would stay pending. One
			// whose only writes change nothing keeps them.
			if len(p.Writes()) > 0 || o.txn.Sent() > 0 || o.hasStoreWrites() {
				prep, tws = p, p.Writes()
			} else {
				// A record that changes nothing: never a hint, which
				// Apply would take for a set.
				tws = []store.Write{{Key: store.StreamTimeKey, Value: store.StreamTimeValue(t.stream)}}
			}
		}
	}
	t.open = o.next()
	// The changelog records of every store: the default one's, the named
	// ones', the timers' (and the stream time), one per key.
	all := make([]pendingWrites, 0, len(t.stores)+1)
	for i := range o.stores {
		if len(o.stores[i].m) > 0 {
			all = append(all, pendingWrites{st: t.stores[i], topic: t.topics[i], writes: o.stores[i].writes()})
		}
	}
	if len(tws) > 0 {
		all = append(all, pendingWrites{st: t.timers, topic: t.timersTopic, writes: tws, prep: prep})
	}
	nwrites := 0
	for i := range all {
		p := &all[i]
		p.recs = make([]*kgo.Record, 0, len(p.writes))
		for _, w := range p.writes {
			r := changelog.Record(p.topic, t.cfg.Partition, w)
			p.recs = append(p.recs, r)
			o.txn.Send(r)
		}
		nwrites += len(p.writes)
	}
	var writes []store.Write
	if len(all) > 0 && all[0].topic == t.cfg.Changelog && len(o.stores[0].m) > 0 {
		writes = all[0].writes
	}
	var span trace.Span
	if t.tracer != nil {
		span = t.startCommit(ctx, &o, nwrites)
	}
	return &commit{o: o, all: all, nwrites: nwrites, writes: writes, offsets: o.offsets, span: span}, nil
}

// abortOpen aborts o's transaction, the task's own. A lane's is left to
// its owner, which aborts it when a task's part fails.
func (t *Task) abortOpen(ctx context.Context, o open) error {
	if t.cfg.Lane != nil {
		return nil
	}
	return o.txn.Abort(ctx)
}

// finish records a committed transaction and applies its writes to the
// stores; the caller holds mu shared.
func (t *Task) finish(c *commit, tm txn.Timing) (Stats, error) {
	o, all, nwrites, writes := c.o, c.all, c.nwrites, c.writes
	if len(c.offsets) > 0 {
		if t.position == nil {
			t.position = make(map[string]int64, len(c.offsets))
		}
		maps.Copy(t.position, c.offsets)
	}
	st := o.stats
	st.writes, st.transactional, st.fired = writes, true, o.fired
	t.cfg.Logger.Debug("transaction committed", "partition", t.cfg.Partition,
		"records", o.records, "outputs", o.outputs, "state_writes", nwrites, "timers_fired", o.fired,
		"produce", tm.Produce, "offsets", tm.Offsets, "total", tm.Total, "open", time.Since(o.began), "opening", o.opening)
	t.commits.Add(1)
	// Each store applies its writes in a Pebble batch of its own,
	// synced: they apply at once, so their syncs overlap.
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i := range all {
		p := &all[i]
		if p.st == nil {
			continue
		}
		// The store's checkpoint moves with the state, in one batch: the
		// offset after this transaction's last record in the store's
		// changelog (its offset is set once End returned). A warm
		// restart replays from there; the marker at or past it is
		// skipped on replay.
		apply := func() {
			next, ok := changelog.NextOffset(p.recs, p.topic, t.cfg.Partition)
			switch {
			case p.prep != nil && ok:
				errs[i] = p.st.ApplyPreparedThrough(p.prep, next)
			case p.prep != nil:
				errs[i] = p.st.ApplyPrepared(p.prep)
			case ok:
				errs[i] = p.st.ApplyThrough(p.writes, next)
			default:
				errs[i] = p.st.Apply(p.writes)
			}
		}
		if i == len(all)-1 {
			apply() // the last one on this goroutine
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			apply()
		}()
	}
	wg.Wait()
	// last is what the store holds of the transaction (getStamped reads
	// it in the store's place): none after a failed update.
	t.last = nil
	if err := errors.Join(errs...); err != nil {
		return st, fmt.Errorf("task %d: transaction committed but the store update failed (restored from the changelog on restart): %w", t.cfg.Partition, err)
	}
	if o.stores[0].stamped {
		t.last = o.stores[0].m
	}
	return st, nil
}

// Commits returns how many transactions the task committed (CommitOpen
// and Commit).
func (t *Task) Commits() int64 { return t.commits.Load() }

// overlayGet reads key from the open transaction's overlay of the
// default store.
func (t *Task) overlayGet(key []byte) (value []byte, found, ok bool) {
	return t.open.stores[0].get(key)
}
