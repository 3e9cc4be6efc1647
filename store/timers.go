package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// StreamTimeKey is the key of the stream-time record in a timer store
// (Options.Timers): its value is the task's stream time, 8 bytes, a Unix
// time in milliseconds big endian (StreamTimeValue). It cannot collide
// with a TimerKey: state keys are non-empty, so a TimerKey starts with a
// uvarint >= 1, and a TimerKey is never this single byte.
var StreamTimeKey = []byte{0x00}

// dueLower and dueUpper bound the due index of a timer store: entry
// 0x02, kind, due (sign bit flipped, big endian), state key (escaped),
// timer name -> empty; see dueKey.
var (
	dueLower = []byte{0x02}
	dueUpper = []byte{0x03}
)

// TimerKey returns the store (and changelog) key of the timer name of
// stateKey: uvarint(len(stateKey)), stateKey, name.
func TimerKey(stateKey []byte, name string) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(stateKey)+len(name))
	b = binary.AppendUvarint(b, uint64(len(stateKey)))
	b = append(b, stateKey...)
	return append(b, name...)
}

// DecodeTimerKey splits a TimerKey into its state key (a subslice of k)
// and timer name; ok is false when k is not a TimerKey (StreamTimeKey,
// or a length beyond k).
func DecodeTimerKey(k []byte) (stateKey []byte, name string, ok bool) {
	if bytes.Equal(k, StreamTimeKey) {
		return nil, "", false
	}
	n, w := binary.Uvarint(k)
	if w <= 0 || n > uint64(len(k)-w) {
		return nil, "", false
	}
	end := w + int(n)
	return k[w:end:end], string(k[end:]), true
}

// TimerValue returns the store (and changelog) value of a timer of kind
// (the task/process TimeKind) due at due (Unix milliseconds): the kind
// byte, then due as an int64 big endian. A cancel is a delete (a
// changelog tombstone).
func TimerValue(kind uint8, due int64) []byte {
	b := make([]byte, 9)
	b[0] = kind
	binary.BigEndian.PutUint64(b[1:], uint64(due))
	return b
}

// DecodeTimerValue decodes a TimerValue; ok is false unless v is 9 bytes.
func DecodeTimerValue(v []byte) (kind uint8, due int64, ok bool) {
	if len(v) != 9 {
		return 0, 0, false
	}
	return v[0], int64(binary.BigEndian.Uint64(v[1:])), true
}

// StreamTimeValue returns the value of the StreamTimeKey record for stream
// time ms (Unix milliseconds).
func StreamTimeValue(ms int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(ms))
}

// DecodeStreamTime decodes a StreamTimeValue; ok is false unless v is 8
// bytes.
func DecodeStreamTime(v []byte) (ms int64, ok bool) {
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// CompareDue orders timers as Due lists them: by due time, then state
// key, then timer name (bytewise). It returns -1, 0 or +1. A structure
// merged with Due (an open transaction's timers) must use this order.
func CompareDue(aDue int64, aKey []byte, aName string, bDue int64, bKey []byte, bName string) int {
	switch {
	case aDue < bDue:
		return -1
	case aDue > bDue:
		return 1
	}
	if c := bytes.Compare(aKey, bKey); c != 0 {
		return c
	}
	return strings.Compare(aName, bName)
}

// dueKey appends the index key of a timer to b: its byte order is the
// order of (kind, due, state key, name). The due time's sign bit is
// flipped, so that negative due times sort first. The state key is
// escaped (0x00 -> 0x00 0xff) and ends with 0x00 0x01, so that a key
// sorts before its extensions whatever bytes follow; the name comes last
// as it is. A nil stateKey with an empty name gives the bound of due.
func dueKey(b []byte, kind uint8, due int64, stateKey []byte, name string) []byte {
	b = append(b, dueLower[0], kind)
	b = binary.BigEndian.AppendUint64(b, uint64(due)^(1<<63))
	if stateKey == nil && name == "" {
		return b
	}
	for _, c := range stateKey {
		if c == 0x00 {
			b = append(b, 0x00, 0xff)
		} else {
			b = append(b, c)
		}
	}
	b = append(b, 0x00, 0x01)
	return append(b, name...)
}

// parseDueKey splits the tail of an index entry after kind and due into
// the state key and the timer name.
func parseDueKey(tail []byte) (stateKey []byte, name string, ok bool) {
	key := make([]byte, 0, len(tail))
	for i := 0; i < len(tail); i++ {
		if tail[i] != 0x00 {
			key = append(key, tail[i])
			continue
		}
		if i+1 >= len(tail) {
			return nil, "", false
		}
		switch tail[i+1] {
		case 0xff:
			key = append(key, 0x00)
			i++
		case 0x01:
			return key, string(tail[i+2:]), true
		default:
			return nil, "", false
		}
	}
	return nil, "", false
}

// indexTimer adds to b the due-index changes of the timer-store write w,
// given the value the key holds before w (old, found), and checks that w
// is a timer or stream-time record.
func (s *Store) indexTimer(b *pebble.Batch, w Write, old []byte, found bool, lows *lowDues) error {
	if bytes.Equal(w.Key, StreamTimeKey) {
		if !w.Delete {
			if _, ok := DecodeStreamTime(w.Value); !ok {
				return fmt.Errorf("store: stream-time record in %s: value of %d bytes, want 8", s.dir, len(w.Value))
			}
		}
		return nil
	}
	stateKey, name, ok := DecodeTimerKey(w.Key)
	if !ok {
		return fmt.Errorf("store: timer record in %s: key %q is neither a timer key nor the stream-time key", s.dir, w.Key)
	}
	var kind uint8
	var due int64
	if !w.Delete {
		var ok bool
		if kind, due, ok = DecodeTimerValue(w.Value); !ok {
			return fmt.Errorf("store: timer record %q in %s: value of %d bytes, want 9", w.Key, s.dir, len(w.Value))
		}
	}
	if found {
		if bytes.Equal(old, w.Value) && !w.Delete {
			return nil // a replay of the same record: the entry stands
		}
		if okind, odue, okv := DecodeTimerValue(old); okv {
			if err := b.Delete(dueKey(nil, okind, odue, stateKey, name), nil); err != nil {
				return err
			}
		}
	}
	if w.Delete {
		return nil
	}
	lows.add(kind, due)
	return b.Set(dueKey(nil, kind, due, stateKey, name), nil, nil)
}

// lowDues collects the smallest due time per kind of the index entries a
// batch adds.
type lowDues struct {
	set [256]bool
	at  [256]int64
}

func (l *lowDues) add(kind uint8, due int64) {
	if !l.set[kind] || due < l.at[kind] {
		l.set[kind], l.at[kind] = true, due
	}
}

// dueFloors lets Due skip the start of the index, where the entries of
// fired and cancelled timers leave deletion tombstones until Pebble
// compacts them away (walking over them is what a sweep would otherwise
// pay, again and again). Invariant: no live entry of kind k is due before
// at[k]. A batch lowers at[k] to the due times it adds, before its commit
// and again after it, under mu with gen bumped; a Due walk that started
// at at[k] raises it to the first due time it met (or past upTo when it
// met none), unless a batch was applied since the walk began (gen
// changed). Hence the invariant holds even if Due runs while a batch is
// applied.
type dueFloors struct {
	mu  sync.Mutex
	gen uint64
	at  [256]int64
}

func newDueFloors() *dueFloors {
	f := &dueFloors{}
	for i := range f.at {
		f.at[i] = math.MinInt64
	}
	return f
}

// lower lowers the floors to l's due times; bump marks a committed batch.
func (f *dueFloors) lower(l *lowDues, bump bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, ok := range l.set {
		if ok && l.at[k] < f.at[k] {
			f.at[k] = l.at[k]
		}
	}
	if bump {
		f.gen++
	}
}

// start returns the floor of kind and the generation a walk begins at.
func (f *dueFloors) start(kind uint8) (int64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[kind], f.gen
}

// raise raises the floor of kind to to, if no batch was applied since gen.
func (f *dueFloors) raise(kind uint8, gen uint64, to int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen == gen && to > f.at[kind] {
		f.at[kind] = to
	}
}

// Due calls fn for every timer of kind due at or before upTo (Unix
// milliseconds), in ascending order of due time, state key and name
// (CompareDue), until fn returns false or an error, which Due returns.
// key is the timer's state key, valid only during the call. The store must have been opened with Options.Timers. Due may run
// concurrently with itself, Get and Scan.
//
// Cost: one index seek plus the timers visited, whatever the number of
// timers in the store; the walk starts at the earliest due time the
// previous walk met, so the tombstones of timers fired and cancelled
// before it are skipped (only the first walk after Open pays for those
// Pebble has not compacted yet).
func (s *Store) Due(kind uint8, upTo int64, fn func(key []byte, name string, due int64) (bool, error)) error {
	if !s.timers {
		return fmt.Errorf("store: Due on %s, which is not a timer store", s.dir)
	}
	floor, gen := s.floors.start(kind)
	if floor > upTo {
		return nil
	}
	lower := dueKey(nil, kind, floor, nil, "")
	var upper []byte
	if upTo == math.MaxInt64 {
		upper = []byte{dueLower[0], kind + 1}
		if kind == math.MaxUint8 {
			upper = dueUpper
		}
	} else {
		upper = dueKey(nil, kind, upTo+1, nil, "")
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("store: due timers of %s: %w", s.dir, err)
	}
	met := false
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < 10 {
			it.Close()
			return fmt.Errorf("store: due index of %s: short entry %q", s.dir, k)
		}
		due := int64(binary.BigEndian.Uint64(k[2:10]) ^ (1 << 63))
		if !met {
			met = true
			s.floors.raise(kind, gen, due)
		}
		key, name, okk := parseDueKey(k[10:])
		if !okk {
			it.Close()
			return fmt.Errorf("store: due index of %s: bad timer key %q", s.dir, k[10:])
		}
		more, err := fn(key, name, due)
		if err != nil {
			it.Close()
			return err
		}
		if !more {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: due timers of %s: %w", s.dir, err)
	}
	if !met && upTo < math.MaxInt64 {
		s.floors.raise(kind, gen, upTo+1)
	}
	return nil
}

// NextDue returns the earliest due time of the timers of kind, and false
// when there is none: one index seek.
func (s *Store) NextDue(kind uint8) (int64, bool, error) {
	var next int64
	var found bool
	err := s.Due(kind, math.MaxInt64, func(_ []byte, _ string, due int64) (bool, error) {
		next, found = due, true
		return false, nil
	})
	return next, found, err
}

// StreamTime returns the stream time the store holds (the value of its
// StreamTimeKey record), and false when it holds none.
func (s *Store) StreamTime() (int64, bool) { return s.streamTime, s.hasStreamTime }

// loadStreamTime reads the stream-time record into s.
func (s *Store) loadStreamTime() error {
	s.streamTime, s.hasStreamTime = 0, false
	if !s.timers {
		return nil
	}
	v, found, err := s.Get(StreamTimeKey)
	if err != nil || !found {
		return err
	}
	ms, ok := DecodeStreamTime(v)
	if !ok {
		return fmt.Errorf("store: stream-time record in %s: value of %d bytes, want 8", s.dir, len(v))
	}
	s.streamTime, s.hasStreamTime = ms, true
	return nil
}

// KeyTimers calls fn for every timer of stateKey in the store, in
// ascending order of name, until fn returns false or an error, which
// KeyTimers returns; an empty stateKey has none. The store must have been opened with
// Options.Timers. Cost: one seek plus the key's timers, however many
// timers are due. It may run concurrently with Due, Get and Scan.
func (s *Store) KeyTimers(stateKey []byte, fn func(name string, kind uint8, due int64) (bool, error)) error {
	if !s.timers {
		return fmt.Errorf("store: KeyTimers on %s, which is not a timer store", s.dir)
	}
	if len(stateKey) == 0 {
		return nil // no timer has an empty state key
	}
	prefix := TimerKey(stateKey, "")
	// The prefix's length byte(s) come first and stateKey is non-empty,
	// so no other state key's timers and no StreamTimeKey share it.
	return s.Scan(prefix, prefixEnd(prefix), func(k, v []byte) (bool, error) {
		_, name, ok := DecodeTimerKey(k)
		kind, due, okv := DecodeTimerValue(v)
		if !ok || !okv {
			return false, fmt.Errorf("store: timer record %q in %s: not a timer (value of %d bytes)", k, s.dir, len(v))
		}
		return fn(name, kind, due)
	})
}

// prefixEnd is the least key greater than every key starting with p (nil:
// none).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Prepared is a timer store's writes of one transaction, without those
// that would change nothing, and the values their keys held when Prepare
// read them.
type Prepared struct {
	ws  []Write
	old map[string][]byte
}

// Prepare reads the stored values of the timer keys ws writes (one
// iterator pass, as Apply does) and returns ws without the writes that
// would change nothing: a set of the value its key holds, a delete of an
// absent key, a hint (Write.Hint) of a timer due no later, each given
// what the writes before it in ws leave. A timer
// set again at the due time it has, the common case of a window's end or
// a state TTL that rounds its expiry (transformer.StateTTL), then costs
// no changelog record and no store write. The store must have been
// opened with Options.Timers; the writes must be applied with
// ApplyPreparedThrough (or ApplyPrepared) before anything else writes
// the store.
func (s *Store) Prepare(ws []Write) (*Prepared, error) {
	if !s.timers {
		return nil, fmt.Errorf("store: Prepare on %s, which is not a timer store", s.dir)
	}
	old, err := s.readTimers(ws)
	if err != nil {
		return nil, err
	}
	cur := make(map[string][]byte, len(ws))
	kept := make([]Write, 0, len(ws))
	for _, w := range ws {
		if bytes.Equal(w.Key, StreamTimeKey) {
			kept = append(kept, w)
			continue
		}
		v, seen := cur[string(w.Key)]
		if !seen {
			v = old[string(w.Key)]
		}
		if w.Delete && v == nil || !w.Delete && v != nil && bytes.Equal(v, w.Value) {
			continue
		}
		if w.Hint && !w.Delete && v != nil && earlier(v, w.Value) {
			continue
		}
		if w.Delete {
			cur[string(w.Key)] = nil
		} else {
			cur[string(w.Key)] = w.Value
		}
		kept = append(kept, w)
	}
	return &Prepared{ws: kept, old: old}, nil
}

// earlier reports whether timer value v is of the kind of w and due no
// later.
func earlier(v, w []byte) bool {
	vk, vd, ok := DecodeTimerValue(v)
	wk, wd, okw := DecodeTimerValue(w)
	return ok && okw && vk == wk && vd <= wd
}

// Writes returns the prepared writes: those that change the store, in
// the order given to Prepare.
func (p *Prepared) Writes() []Write { return p.ws }

// ApplyPreparedThrough is ApplyThrough of p's writes, with the values
// Prepare read. It applies p once.
func (s *Store) ApplyPreparedThrough(p *Prepared, next int64) error {
	old, err := s.take(p)
	if err != nil {
		return err
	}
	return s.applyCheckpointRead(p.ws, old, Checkpoint{TopicID: s.cp.TopicID, Next: next, Time: time.Now()}, pebble.Sync)
}

// ApplyPrepared is Apply of p's writes, with the values Prepare read. It
// applies p once.
func (s *Store) ApplyPrepared(p *Prepared) error {
	old, err := s.take(p)
	if err != nil || len(p.ws) == 0 {
		return err
	}
	return s.apply(p.ws, old, nil, pebble.NoSync)
}

// take returns the values Prepare read for p, once.
func (s *Store) take(p *Prepared) (map[string][]byte, error) {
	old := p.old
	p.old = nil
	if old == nil {
		return nil, fmt.Errorf("store: prepared writes of %s applied twice", s.dir)
	}
	return old, nil
}
