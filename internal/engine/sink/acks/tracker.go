package acks

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
)

// DefaultCommitKeepalive is the default of CommitKeepalive.
const DefaultCommitKeepalive = 30 * time.Minute

// Errors returned by the Tracker. They are programming errors of the
// caller (a record registered twice or out of order, a record completed
// more often than it has outputs): the watermark of the partition is left
// as it was, so nothing is committed that was not written.
var (
	// ErrNotAssigned: the partition was never assigned or was revoked.
	ErrNotAssigned = errors.New("commit: partition not assigned")
	// ErrOutOfOrder: a record was registered at or below an offset the
	// partition has already registered or advanced past.
	ErrOutOfOrder = errors.New("commit: offset registered out of order")
	// ErrAlreadyComplete: Done or FanOut on a record that has no
	// outstanding output left.
	ErrAlreadyComplete = errors.New("commit: record already complete")
	// ErrInvalidFanOut: FanOut with a negative count.
	ErrInvalidFanOut = errors.New("commit: negative fan-out")
	// ErrZeroTicket: Done or FanOut on a Ticket that Register did not
	// return.
	ErrZeroTicket = errors.New("commit: zero Ticket")
)

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s[%d]", tp.Topic, tp.Partition) }

// Offset is an offset to commit: the next offset the group reads from the
// partition.
type Offset struct {
	Topic     string
	Partition int32
	Offset    int64
}

// EpochOffsets converts offsets into the form kgo.Client.CommitOffsets
// takes. The leader epoch is -1 (unknown), which every broker accepts.
func EpochOffsets(offs []Offset) map[string]map[int32]kgo.EpochOffset {
	m := make(map[string]map[int32]kgo.EpochOffset)
	for _, o := range offs {
		ps := m[o.Topic]
		if ps == nil {
			ps = make(map[int32]kgo.EpochOffset)
			m[o.Topic] = ps
		}
		ps[o.Partition] = kgo.EpochOffset{Epoch: -1, Offset: o.Offset}
	}
	return m
}

// Opt configures a Tracker.
type Opt interface{ apply(*cfg) }

type cfg struct {
	keepalive time.Duration
	now       func() time.Time
}

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

// CommitKeepalive is how long a partition's committable offset may go
// unreported before Keepalive reports it again for a re-commit. Keep it well
// below the broker's offsets.retention.minutes (default 7 days). Default 30
// minutes; must be positive.
func CommitKeepalive(d time.Duration) Opt { return optFunc(func(c *cfg) { c.keepalive = d }) }

// WithClock replaces time.Now for keepalive accounting (tests).
func WithClock(now func() time.Time) Opt { return optFunc(func(c *cfg) { c.now = now }) }

// Tracker tracks outstanding records per partition and their committable
// offsets. Create it with New; it is safe for concurrent use.
type Tracker struct {
	cfg cfg

	mu    sync.RWMutex
	parts map[TopicPartition]*partition
}

// New returns a Tracker with no partitions assigned. An invalid option is
// a *flechtwerk.ConfigError with CodeInvalidOption.
func New(opts ...Opt) (*Tracker, error) {
	c := cfg{keepalive: DefaultCommitKeepalive, now: time.Now}
	for _, o := range opts {
		o.apply(&c)
	}
	var errs []error
	if c.keepalive <= 0 {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "CommitKeepalive",
			"must be positive, got %v", c.keepalive))
	}
	if c.now == nil {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "WithClock", "nil clock"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Tracker{cfg: c, parts: make(map[TopicPartition]*partition)}, nil
}

// Ticket identifies one registered record for FanOut and Done. The zero
// Ticket is invalid.
type Ticket struct {
	p   *partition
	seq uint64
}

// slot is one outstanding record: its offset and how many of its outputs
// are not yet durably written (0: complete, waiting to be popped).
type slot struct {
	offset  int64
	pending int64
}

// partition is the state of one assigned partition. Records are kept in a
// ring in registration (= offset) order; ring[head] has sequence number
// headSeq, the record registered n-th after it has headSeq+n.
type partition struct {
	tp TopicPartition

	mu      sync.Mutex
	revoked bool
	ring    []slot // len is a power of two
	head    int
	n       int
	headSeq uint64
	// next is the fetch position: one past the highest registered offset,
	// or further after Advance; -1 before anything was registered.
	next int64
	// floor is the committed offset seen at assignment; -1 for none.
	floor int64

	reported   int64     // offset last returned by Changed, Keepalive or All (-1: none)
	reportedAt time.Time // when it was returned (or the assignment time)
}

// committable returns the committable offset; ok is false when there is
// nothing to commit (no committed offset, nothing fetched). p.mu is held.
func (p *partition) committable() (int64, bool) {
	c := p.next
	if p.n > 0 {
		c = p.ring[p.head].offset
	}
	if p.floor > c {
		c = p.floor
	}
	return c, c >= 0
}

// Assign starts tracking tp. committed is the group's committed offset for
// tp at startup, or -1 if it has none; it is the floor below which the
// tracker never proposes a commit. Assigning a tracked partition again
// starts it afresh: tickets of the old assignment are ignored.
func (t *Tracker) Assign(tp TopicPartition, committed int64) {
	if committed < -1 {
		committed = -1
	}
	p := &partition{
		tp:         tp,
		ring:       make([]slot, 64),
		next:       -1,
		floor:      committed,
		reported:   committed,
		reportedAt: t.cfg.now(),
	}
	t.mu.Lock()
	old := t.parts[tp]
	t.parts[tp] = p
	t.mu.Unlock()
	if old != nil {
		old.mu.Lock()
		old.revoked = true
		old.mu.Unlock()
	}
}

// Revoke stops tracking tp and returns its committable offset for a last
// commit (ok is false if there is none or tp was not assigned). Later Done
// and FanOut calls on tickets of tp are no-ops: the records they complete
// belong to whoever is assigned tp next and will be redelivered there.
func (t *Tracker) Revoke(tp TopicPartition) (Offset, bool) {
	t.mu.Lock()
	p := t.parts[tp]
	delete(t.parts, tp)
	t.mu.Unlock()
	if p == nil {
		return Offset{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.revoked = true
	c, ok := p.committable()
	return Offset{Topic: tp.Topic, Partition: tp.Partition, Offset: c}, ok
}

func (t *Tracker) lookup(tp TopicPartition) (*partition, error) {
	t.mu.RLock()
	p := t.parts[tp]
	t.mu.RUnlock()
	if p == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotAssigned, tp)
	}
	return p, nil
}

// Register records that the record at offset of tp was fetched and is
// about to be handed on, with one outstanding output. Offsets of a
// partition must be registered in increasing order; gaps are fine.
func (t *Tracker) Register(tp TopicPartition, offset int64) (Ticket, error) {
	p, err := t.lookup(tp)
	if err != nil {
		return Ticket{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked {
		return Ticket{}, fmt.Errorf("%w: %s", ErrNotAssigned, tp)
	}
	if offset < 0 || offset < p.next {
		return Ticket{}, fmt.Errorf("%w: %s offset %d, expected %d or above", ErrOutOfOrder, tp, offset, max(p.next, 0))
	}
	if p.n == len(p.ring) {
		p.grow()
	}
	p.ring[(p.head+p.n)&(len(p.ring)-1)] = slot{offset: offset, pending: 1}
	seq := p.headSeq + uint64(p.n)
	p.n++
	p.next = offset + 1
	return Ticket{p: p, seq: seq}, nil
}

func (p *partition) grow() {
	ring := make([]slot, 2*len(p.ring))
	for i := 0; i < p.n; i++ {
		ring[i] = p.ring[(p.head+i)&(len(p.ring)-1)]
	}
	p.ring = ring
	p.head = 0
}

// Advance reports that the fetch position of tp moved to next: every offset
// below next has been fetched, and those not registered (transaction
// markers, compacted gaps, skipped records) will never be. With nothing
// outstanding the committable offset becomes next. A next at or below the
// current position is ignored. Call it after registering the records of a
// poll: a record below next can no longer be registered.
func (t *Tracker) Advance(tp TopicPartition, next int64) error {
	p, err := t.lookup(tp)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if next > p.next {
		p.next = next
	}
	p.mu.Unlock()
	return nil
}

// FanOut replaces one outstanding output of the record with k outputs: a
// step that turned the record (or one of its outputs) into k records calls
// it before those are handed on. k = 0 completes that output, so a record
// that produced nothing is released at once.
func (t *Tracker) FanOut(tk Ticket, k int) error {
	if k < 0 {
		return fmt.Errorf("%w: %d", ErrInvalidFanOut, k)
	}
	return tk.add(int64(k) - 1)
}

// Done reports that one output of the record is durably written. The
// record is complete when its last outstanding output is done; the
// committable offset of its partition then moves past it unless an earlier
// record is still outstanding.
func (t *Tracker) Done(tk Ticket) error { return tk.add(-1) }

func (tk Ticket) add(delta int64) error {
	p := tk.p
	if p == nil {
		return ErrZeroTicket
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked {
		return nil
	}
	if tk.seq < p.headSeq {
		return fmt.Errorf("%w: %s", ErrAlreadyComplete, p.tp)
	}
	i := int(tk.seq - p.headSeq)
	s := &p.ring[(p.head+i)&(len(p.ring)-1)]
	if s.pending == 0 {
		return fmt.Errorf("%w: %s offset %d", ErrAlreadyComplete, p.tp, s.offset)
	}
	s.pending += delta
	if s.pending > 0 || i != 0 {
		return nil
	}
	// The head is complete: pop it and every complete record behind it.
	mask := len(p.ring) - 1
	for p.n > 0 && p.ring[p.head].pending == 0 {
		p.head = (p.head + 1) & mask
		p.n--
		p.headSeq++
	}
	return nil
}

// Committable returns the committable offset of tp; ok is false if tp is
// not assigned or has nothing to commit yet.
func (t *Tracker) Committable(tp TopicPartition) (int64, bool) {
	p, err := t.lookup(tp)
	if err != nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.committable()
}

// Changed returns, sorted by topic and partition, the committable offset of
// every partition whose offset differs from the one last reported (by
// Changed, Keepalive or All), and marks them reported. Call it once per
// poll cycle and commit the result asynchronously.
func (t *Tracker) Changed() []Offset {
	return t.collect(func(p *partition, c int64, _ time.Time) bool { return c != p.reported })
}

// Keepalive returns, sorted, the committable offset of every partition
// whose offset was last reported CommitKeepalive ago or longer (at
// assignment for a partition never reported), and marks them reported.
// Re-commit them so offset retention never expires a live position.
func (t *Tracker) Keepalive() []Offset {
	return t.collect(func(p *partition, _ int64, now time.Time) bool {
		return now.Sub(p.reportedAt) >= t.cfg.keepalive
	})
}

// All returns, sorted, the committable offset of every assigned partition
// that has one, and marks them reported: call it on close for a
// synchronous final commit.
func (t *Tracker) All() []Offset {
	return t.collect(func(*partition, int64, time.Time) bool { return true })
}

// CommitFailed reports that committing offs failed: each partition whose
// committable offset is still the one in offs is returned again by the next
// Changed.
func (t *Tracker) CommitFailed(offs ...Offset) {
	for _, o := range offs {
		p, err := t.lookup(TopicPartition{Topic: o.Topic, Partition: o.Partition})
		if err != nil {
			continue
		}
		p.mu.Lock()
		if p.reported == o.Offset {
			p.reported = -2 // differs from any committable offset
		}
		p.mu.Unlock()
	}
}

func (t *Tracker) collect(want func(p *partition, c int64, now time.Time) bool) []Offset {
	now := t.cfg.now()
	t.mu.RLock()
	var out []Offset
	for _, p := range t.parts {
		p.mu.Lock()
		if c, ok := p.committable(); ok && want(p, c, now) {
			p.reported, p.reportedAt = c, now
			out = append(out, Offset{Topic: p.tp.Topic, Partition: p.tp.Partition, Offset: c})
		}
		p.mu.Unlock()
	}
	t.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}
