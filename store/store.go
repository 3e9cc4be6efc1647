package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Layout is the version of the on-disk layout this package writes: how
// state keys, values, the metadata and the checkpoint are stored. Open
// keeps a store of layout 1 (a value stored as it is, its stamp under a
// key of its own) and reads and writes it in that layout until it is
// wiped; it wipes a store of any other layout (or of none: stores
// written before layouts existed). Layout 2 stores a value after its
// stamp; a version that reads layout 1 only wipes it.
const Layout = 2

// Keys: the metadata and the checkpoint live under prefix 0x00, state key k
// under 0x01 followed by k, so that no state key can collide with them. In
// layout 2 a state store's value is stored after its stamp (inline).
var (
	metaKey       = []byte{0x00, 'm'}
	checkpointKey = []byte{0x00, 'c'}
	statePrefix   = byte(0x01)
	stateLower    = []byte{0x01}
	stateUpper    = []byte{0x02}
	// stampPrefix holds the Stamp of state key k under 0x03 followed by
	// k in a layout 1 store (0x02 is a timer store's due index).
	stampPrefix = byte(0x03)
	stampLower  = []byte{0x03}
	stampUpper  = []byte{0x04}
)

// Dir returns the directory of the store of one task:
// {stateDir}/{applicationID}/{partition}.
func Dir(stateDir, applicationID string, partition int32) string {
	return filepath.Join(stateDir, applicationID, strconv.Itoa(int(partition)))
}

// NamedDir returns the directory of the named store name of one task:
// {stateDir}/{applicationID}/{partition}.{name}, beside the task's default
// store (Dir). The timer store is the named store "timers".
func NamedDir(stateDir, applicationID string, partition int32, name string) string {
	return Dir(stateDir, applicationID, partition) + "." + name
}

// Write is one committed state change: a put of Value, or a delete when
// Delete is set.
type Write struct {
	Key   []byte
	Value []byte
	// Stamp, when not empty, is kept with a put's value until the key's
	// next write (StampOf); a put without one or a delete drops it. Its
	// bytes are the caller's (changelog.StampHeader carries them on the
	// changelog). A layout 2 store keeps it in the same Pebble key as
	// the value, ahead of it; a layout 1 store under a key of its own.
	// Not in a timer store.
	Stamp  []byte
	Delete bool
	// Hint makes a timer store's set a hint (Prepare): it is dropped when
	// the key holds a timer of the same kind due no later. Elsewhere a
	// hint is a set.
	Hint bool
}

// Checkpoint is the changelog position a store reflects. It is written in
// the same Pebble batch as the state it describes.
type Checkpoint struct {
	// TopicID is the ID of the changelog topic the store was restored
	// from; a topic deleted and recreated under the same name has another.
	TopicID [16]byte
	// Next is the changelog offset to replay from: every committed record
	// below Next is reflected in the store.
	Next int64
	// Time is a lower bound of the time at which any record at or above
	// Next was written (the wall time of the commit that wrote the
	// checkpoint). A tombstone written after the checkpoint survives in
	// the changelog for at least delete.retention.ms after Time.
	Time time.Time
}

// Options configures Open. The zero value is ready to use.
type Options struct {
	// ApplicationID is the application the store belongs to, recorded in
	// the store's metadata. Open wipes a store recorded for another
	// application id. Default: empty (stores of an empty id only).
	ApplicationID string
	// LockWait bounds how long Open waits for another opener of the same
	// directory to close it, e.g. the previous owner of a task that moved
	// within this process and is still closing. Default (zero)
	// DefaultLockWait, 5s; negative: do not wait.
	LockWait time.Duration
	// Timers makes the store a timer store: every key is a TimerKey or
	// StreamTimeKey and every value decodes (TimerValue, StreamTimeValue),
	// or a write fails; every apply path (Apply, ApplyThrough,
	// ApplyCheckpoint, ApplyRestored) keeps the index of timers by due
	// time that Due and NextDue read, and StreamTime reports the stream
	// time record. Recorded in the metadata: Open wipes a store created
	// with the other setting.
	Timers bool
	// Logger receives Pebble's own log lines (errors at Error level,
	// informational lines at Debug) and a line for every wipe of a store
	// found unusable. Default: discard.
	Logger *slog.Logger
}

// meta is the store's metadata, written when the store is created.
type meta struct {
	Layout        int    `json:"layout"`
	ApplicationID string `json:"application_id"`
	// Timers: a timer store (Options.Timers); absent in other stores.
	Timers bool `json:"timers,omitempty"`
}

// Store is one task's Pebble database.
type Store struct {
	dir    string
	app    string
	logger *slog.Logger
	db     *pebble.DB
	lock   *dirLock
	cp     Checkpoint
	hasCP  bool
	// next mirrors cp.Next for Next, which other goroutines call while
	// the store's writer applies batches (-1: no checkpoint).
	next atomic.Int64
	// timers: a timer store; streamTime is its stream-time record.
	timers        bool
	streamTime    int64
	hasStreamTime bool
	floors        *dueFloors
	// inline: a value of a state key is stored as its stamp's length
	// (uvarint), the stamp and the value (a state store of layout 2).
	// Otherwise stamps: the store may hold stamps under stampPrefix,
	// which a write without one must drop.
	inline bool
	stamps bool
}

// Open takes the exclusive lock of dir, then opens the store there. The
// lock is a file beside the directory, dir + ".lock"; it is taken before
// anything in dir is read, removed or written, held until Close, and
// released by the kernel if the process dies. When another opener
// (another process, or another Store in this one) holds it, Open tries
// again until o.LockWait has passed and then returns a *LockedError
// (errors.Is(err, ErrLocked)), having touched nothing.
//
// A store left in dir is kept only when its metadata names a layout Open
// reads (Layout, or 1) and application id o.ApplicationID; any other store
// (no metadata, another layout, another application, files Pebble cannot
// open) is wiped,
// with a log line naming the reason, and an empty store is created. A kept
// store's checkpoint (Checkpoint) says how much of the changelog it
// reflects; whether that is usable is the restorer's decision
// (changelog.Recover), which wipes it with Reset when it is not.
func Open(ctx context.Context, dir string, o Options) (*Store, error) {
	wait := o.LockWait
	switch {
	case wait == 0:
		wait = DefaultLockWait
	case wait < 0:
		wait = 0
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("store: creating %s: %w", filepath.Dir(dir), err)
	}
	l, err := lock(ctx, dir, wait)
	if err != nil {
		return nil, err
	}
	st := &Store{dir: dir, app: o.ApplicationID, logger: logger, lock: l, timers: o.Timers, floors: newDueFloors()}
	if err := st.open(); err != nil {
		l.release()
		return nil, err
	}
	return st, nil
}

// open opens the store in s.dir, wiping it first when it is unusable; the
// caller holds the lock.
func (s *Store) open() error {
	reason, err := s.openExisting()
	if err != nil {
		return err
	}
	if reason == "" {
		if err := s.loadStamps(); err != nil {
			s.db.Close()
			s.db = nil
			return err
		}
		if err := s.loadStreamTime(); err != nil {
			s.db.Close()
			s.db = nil
			return err
		}
		return touch(s.dir)
	}
	if reason != "none" {
		s.logger.Warn("store: wiping a store that cannot be trusted", "store", s.dir, "reason", reason)
	}
	return s.create()
}

// openExisting opens the store left in s.dir if it is usable. It returns
// the reason why not ("none" when there is no store), with the database
// closed.
func (s *Store) openExisting() (string, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(entries) == 0 {
		return "none", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: reading %s: %w", s.dir, err)
	}
	db, err := pebble.Open(s.dir, s.pebbleOptions())
	if err != nil {
		return fmt.Sprintf("pebble cannot open it: %v", err), nil
	}
	reason, cp, hasCP := s.check(db)
	if reason != "" {
		if err := db.Close(); err != nil {
			s.logger.Warn("store: closing an unusable store", "store", s.dir, "err", err)
		}
		return reason, nil
	}
	s.db, s.cp, s.hasCP = db, cp, hasCP
	s.setNext()
	return "", nil
}

// check returns why db cannot be used ("" if it can) and its checkpoint.
func (s *Store) check(db *pebble.DB) (string, Checkpoint, bool) {
	v, closer, err := db.Get(metaKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return "no metadata (a store of a layout before version 1)", Checkpoint{}, false
	}
	if err != nil {
		return fmt.Sprintf("reading its metadata: %v", err), Checkpoint{}, false
	}
	var m meta
	err = json.Unmarshal(v, &m)
	closer.Close()
	switch {
	case err != nil:
		return fmt.Sprintf("unreadable metadata: %v", err), Checkpoint{}, false
	case m.Layout != 1 && m.Layout != Layout:
		return fmt.Sprintf("layout version %d, this version reads 1 and %d", m.Layout, Layout), Checkpoint{}, false
	case m.ApplicationID != s.app:
		return fmt.Sprintf("it belongs to application id %q, not %q", m.ApplicationID, s.app), Checkpoint{}, false
	case m.Timers != s.timers:
		return fmt.Sprintf("timer store %v, want %v", m.Timers, s.timers), Checkpoint{}, false
	}
	s.inline = m.Layout >= 2 && !s.timers
	v, closer, err = db.Get(checkpointKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return "", Checkpoint{}, false
	}
	if err != nil {
		return fmt.Sprintf("reading its checkpoint: %v", err), Checkpoint{}, false
	}
	defer closer.Close()
	cp, ok := decodeCheckpoint(v)
	if !ok {
		return fmt.Sprintf("unreadable checkpoint (%d bytes)", len(v)), Checkpoint{}, false
	}
	return "", cp, true
}

// create wipes s.dir and creates an empty store with its metadata.
func (s *Store) create() error {
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("store: wiping %s: %w", s.dir, err)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("store: creating %s: %w", s.dir, err)
	}
	db, err := pebble.Open(s.dir, s.pebbleOptions())
	if err != nil {
		return fmt.Errorf("store: opening %s: %w", s.dir, err)
	}
	s.inline = !s.timers
	m, _ := json.Marshal(meta{Layout: Layout, ApplicationID: s.app, Timers: s.timers})
	if err := db.Set(metaKey, m, pebble.Sync); err != nil {
		db.Close()
		return fmt.Errorf("store: writing the metadata of %s: %w", s.dir, err)
	}
	if err := touch(s.dir); err != nil {
		db.Close()
		return err
	}
	s.db, s.cp, s.hasCP = db, Checkpoint{}, false
	s.streamTime, s.hasStreamTime = 0, false
	s.floors = newDueFloors()
	s.stamps = false
	s.setNext()
	return nil
}

// loadStamps sets s.stamps when the store holds a stamp under
// stampPrefix.
func (s *Store) loadStamps() error {
	if s.inline {
		return nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: stampLower, UpperBound: stampUpper})
	if err != nil {
		return fmt.Errorf("store: iterate %s: %w", s.dir, err)
	}
	s.stamps = it.First()
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: iterate %s: %w", s.dir, err)
	}
	return nil
}

// StampOf returns a copy of the stamp kept with key's value (Write.Stamp)
// and whether there is one.
func (s *Store) StampOf(key []byte) ([]byte, bool, error) {
	if s.inline {
		v, closer, err := s.getRaw(key)
		if err != nil || v == nil {
			return nil, false, err
		}
		defer closer.Close()
		stamp, _, err := s.split(key, v)
		if err != nil || len(stamp) == 0 {
			return nil, false, err
		}
		return bytes.Clone(stamp), true, nil
	}
	if !s.stamps {
		return nil, false, nil
	}
	k := make([]byte, 1+len(key))
	k[0] = stampPrefix
	copy(k[1:], key)
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: get stamp in %s: %w", s.dir, err)
	}
	defer closer.Close()
	return bytes.Clone(v), true, nil
}

// stamp adds to b the change of key's stamp that w makes; stamped says
// whether the batch already holds a stamp.
func (s *Store) stamp(b *pebble.Batch, w Write, stamped bool) error {
	if len(w.Stamp) == 0 && !s.stamps && !stamped {
		return nil
	}
	var op *pebble.DeferredBatchOp
	if len(w.Stamp) == 0 || w.Delete {
		op = b.DeleteDeferred(1 + len(w.Key))
	} else {
		op = b.SetDeferred(1+len(w.Key), len(w.Stamp))
		copy(op.Value, w.Stamp)
	}
	op.Key[0] = stampPrefix
	copy(op.Key[1:], w.Key)
	return op.Finish()
}

// pebbleOptions are the options of every Pebble open. The WAL is on: see
// the package doc, "Crash consistency".
func (s *Store) pebbleOptions() *pebble.Options {
	return &pebble.Options{
		Logger: pebbleLogger{l: s.logger.With("store", s.dir)},
	}
}

// Reset wipes the store, under the lock it holds, and leaves it empty,
// recorded as following the changelog topic of ID topicID from its start
// (a checkpoint at offset 0 with zero Time, which no restorer accepts as
// warm by age; a restore then writes real checkpoints as it goes).
func (s *Store) Reset(topicID [16]byte) error {
	if s.db != nil {
		if err := s.db.Close(); err != nil {
			s.logger.Warn("store: closing before a wipe", "store", s.dir, "err", err)
		}
		s.db = nil
	}
	if err := s.create(); err != nil {
		return err
	}
	s.cp = Checkpoint{TopicID: topicID}
	return nil
}

// touch sets the modification time of dir to now: the age Prune measures
// is the time since a store was last opened or closed.
func touch(dir string) error {
	now := time.Now()
	if err := os.Chtimes(dir, now, now); err != nil {
		return fmt.Errorf("store: touching %s: %w", dir, err)
	}
	return nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Checkpoint returns the store's last written checkpoint, and false when
// none was written (a new store, or one just Reset: its TopicID is then
// the one given to Reset).
func (s *Store) Checkpoint() (Checkpoint, bool) { return s.cp, s.hasCP }

// Get returns a copy of the value of key and whether it exists.
func (s *Store) Get(key []byte) ([]byte, bool, error) {
	v, closer, err := s.getRaw(key)
	if err != nil || v == nil {
		return nil, false, err
	}
	defer closer.Close()
	if s.inline {
		if _, v, err = s.split(key, v); err != nil {
			return nil, false, err
		}
	}
	return append(make([]byte, 0, len(v)), v...), true, nil
}

// GetStamped is Get that also returns the stamp kept with the value
// (Write.Stamp; nil when it has none), a copy, in one read of a layout 2
// store.
func (s *Store) GetStamped(key []byte) (value, stamp []byte, found bool, err error) {
	if !s.inline {
		if value, found, err = s.Get(key); err != nil || !found {
			return nil, nil, false, err
		}
		stamp, _, err = s.StampOf(key)
		return value, stamp, err == nil, err
	}
	v, closer, err := s.getRaw(key)
	if err != nil || v == nil {
		return nil, nil, false, err
	}
	defer closer.Close()
	st, v, err := s.split(key, v)
	if err != nil {
		return nil, nil, false, err
	}
	b := make([]byte, 0, len(st)+len(v))
	b = append(append(b, st...), v...)
	if len(st) == 0 {
		return b, nil, true, nil
	}
	return b[len(st):], b[:len(st):len(st)], true, nil
}

// getRaw returns the stored value of state key key (nil and no closer
// when it is absent), valid until the closer is closed.
func (s *Store) getRaw(key []byte) ([]byte, io.Closer, error) {
	k := make([]byte, 1+len(key))
	k[0] = statePrefix
	copy(k[1:], key)
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("store: get %q in %s: %w", key, s.dir, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, closer, nil
}

// split splits v, the stored value of state key key in a store with
// inline stamps, into its stamp and its value.
func (s *Store) split(key, v []byte) (stamp, value []byte, err error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || n > uint64(len(v)-k) {
		return nil, nil, fmt.Errorf("store: value of %q in %s: no stamp header (%d bytes)", key, s.dir, len(v))
	}
	return v[k : k+int(n)], v[k+int(n):], nil
}

// Apply writes ws atomically (one Pebble batch) and leaves the checkpoint
// as it is. That is safe, only slower to recover: the store may reflect
// more of the changelog than its checkpoint says, and a replay from the
// checkpoint writes the same committed values again. Committed state
// should be applied with ApplyThrough.
func (s *Store) Apply(ws []Write) error {
	if len(ws) == 0 {
		return nil
	}
	return s.apply(ws, nil, nil, pebble.NoSync)
}

// ApplyThrough writes ws, the state writes of one committed transaction,
// and the checkpoint {the store's changelog topic ID, next, now} in one
// Pebble batch. next is the changelog offset just after the transaction's
// last changelog record (changelog.Next of its produced records); the
// transaction's marker may lie at next, and a replay skips it. The
// checkpoint must never be ahead of the committed changelog: call
// ApplyThrough only after the transaction committed.
func (s *Store) ApplyThrough(ws []Write, next int64) error {
	return s.ApplyCheckpoint(ws, Checkpoint{TopicID: s.cp.TopicID, Next: next, Time: time.Now()})
}

// ApplyCheckpoint writes ws and cp in one Pebble batch, synced to disk:
// after any crash the store holds both or neither, and after a process
// crash (SIGKILL) both.
func (s *Store) ApplyCheckpoint(ws []Write, cp Checkpoint) error {
	return s.applyCheckpoint(ws, cp, pebble.Sync)
}

// ApplyRestored is ApplyCheckpoint without the sync, for the batches of a
// restore: a crash may lose the last of them (with their checkpoints),
// which the next restore replays again. The restore's final checkpoint
// goes through ApplyCheckpoint, whose sync covers the earlier batches.
func (s *Store) ApplyRestored(ws []Write, cp Checkpoint) error {
	return s.applyCheckpoint(ws, cp, pebble.NoSync)
}

func (s *Store) applyCheckpoint(ws []Write, cp Checkpoint, sync *pebble.WriteOptions) error {
	return s.applyCheckpointRead(ws, nil, cp, sync)
}

// applyCheckpointRead is applyCheckpoint given the values of the timer
// keys ws writes (readTimers; nil: read them).
func (s *Store) applyCheckpointRead(ws []Write, old map[string][]byte, cp Checkpoint, sync *pebble.WriteOptions) error {
	if err := s.apply(ws, old, &cp, sync); err != nil {
		return err
	}
	s.cp, s.hasCP = cp, true
	s.setNext()
	return nil
}

// setNext publishes the checkpoint's offset for Next.
func (s *Store) setNext() {
	if s.hasCP {
		s.next.Store(s.cp.Next)
	} else {
		s.next.Store(-1)
	}
}

// Next returns the offset of the store's last written checkpoint (see
// Checkpoint), and false when none was written. Unlike Checkpoint it is
// safe to call concurrently with every other method, e.g. by a group
// member reporting how far this instance's stores are while their tasks
// commit.
func (s *Store) Next() (int64, bool) {
	n := s.next.Load()
	return n, n >= 0
}

// apply writes ws (and cp, when not nil). written is, for a timer store,
// the value of every timer key ws writes (readTimers), nil to read them;
// apply keeps it at the value before the write at hand (nil: absent), for
// the due index.
func (s *Store) apply(ws []Write, written map[string][]byte, cp *Checkpoint, sync *pebble.WriteOptions) error {
	b := s.db.NewBatch()
	defer b.Close()
	var lows *lowDues
	if s.timers {
		if written == nil {
			var err error
			if written, err = s.readTimers(ws); err != nil {
				return err
			}
		}
		lows = new(lowDues)
	}
	st, stSet := s.streamTime, s.hasStreamTime
	stamped := false
	for _, w := range ws {
		if s.timers {
			if err := s.applyTimer(b, w, written, lows); err != nil {
				return err
			}
			if bytes.Equal(w.Key, StreamTimeKey) {
				st, stSet = 0, false
				if !w.Delete {
					st, stSet = DecodeStreamTime(w.Value)
				}
			}
		}
		var op *pebble.DeferredBatchOp
		switch {
		case w.Delete:
			op = b.DeleteDeferred(1 + len(w.Key))
		case s.inline:
			var hdr [binary.MaxVarintLen64]byte
			h := binary.PutUvarint(hdr[:], uint64(len(w.Stamp)))
			op = b.SetDeferred(1+len(w.Key), h+len(w.Stamp)+len(w.Value))
			copy(op.Value, hdr[:h])
			copy(op.Value[h:], w.Stamp)
			copy(op.Value[h+len(w.Stamp):], w.Value)
		default:
			op = b.SetDeferred(1+len(w.Key), len(w.Value))
			copy(op.Value, w.Value)
		}
		op.Key[0] = statePrefix
		copy(op.Key[1:], w.Key)
		if err := op.Finish(); err != nil {
			return fmt.Errorf("store: batch in %s: %w", s.dir, err)
		}
		if !s.timers && !s.inline {
			if err := s.stamp(b, w, stamped); err != nil {
				return fmt.Errorf("store: batch in %s: %w", s.dir, err)
			}
			stamped = stamped || len(w.Stamp) > 0 && !w.Delete
		}
	}
	if cp != nil {
		if err := b.Set(checkpointKey, encodeCheckpoint(*cp), nil); err != nil {
			return fmt.Errorf("store: batch in %s: %w", s.dir, err)
		}
	}
	if lows != nil {
		s.floors.lower(lows, false)
	}
	if err := b.Commit(sync); err != nil {
		return fmt.Errorf("store: commit in %s: %w", s.dir, err)
	}
	if lows != nil {
		s.floors.lower(lows, true)
	}
	s.streamTime, s.hasStreamTime = st, stSet
	s.stamps = s.stamps || stamped
	return nil
}

// applyTimer adds to b the due-index changes of w, a write to a timer
// store, given in written the value of every key of the batch before w
// (readTimers); then records w in written.
func (s *Store) applyTimer(b *pebble.Batch, w Write, written map[string][]byte, lows *lowDues) error {
	old := written[string(w.Key)]
	if err := s.indexTimer(b, w, old, old != nil, lows); err != nil {
		return err
	}
	if bytes.Equal(w.Key, StreamTimeKey) {
		return nil
	}
	if w.Delete {
		written[string(w.Key)] = nil
	} else {
		written[string(w.Key)] = append(make([]byte, 0, len(w.Value)), w.Value...)
	}
	return nil
}

// readTimers returns the stored value of every timer key ws writes (a
// copy, never nil; nil when the key is absent). It reads them in key
// order with one iterator: a point read per key would open the
// iterators of every level anew, each reading index blocks, for every
// key.
func (s *Store) readTimers(ws []Write) (map[string][]byte, error) {
	old := make(map[string][]byte, len(ws))
	keys := make([][]byte, 0, len(ws))
	for _, w := range ws {
		if bytes.Equal(w.Key, StreamTimeKey) {
			continue // indexTimer needs no value before it
		}
		if _, seen := old[string(w.Key)]; !seen {
			old[string(w.Key)] = nil
			keys = append(keys, w.Key)
		}
	}
	if len(keys) == 0 {
		return old, nil
	}
	slices.SortFunc(keys, bytes.Compare)
	lower := append([]byte{statePrefix}, keys[0]...)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: stateUpper})
	if err != nil {
		return nil, fmt.Errorf("store: reading timers of %s: %w", s.dir, err)
	}
	pk := make([]byte, 0, len(lower))
	for _, k := range keys {
		pk = append(append(pk[:0], statePrefix), k...)
		if !it.SeekGE(pk) {
			break // no stored key at or after k: neither after it
		}
		if !bytes.Equal(it.Key(), pk) {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("store: reading timer %q of %s: %w", k, s.dir, err)
		}
		old[string(k)] = append(make([]byte, 0, len(v)), v...)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("store: reading timers of %s: %w", s.dir, err)
	}
	return old, nil
}

// encodeCheckpoint: topic ID (16 bytes), next (8), time in Unix
// nanoseconds (8), big endian.
func encodeCheckpoint(cp Checkpoint) []byte {
	b := make([]byte, 0, 32)
	b = append(b, cp.TopicID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(cp.Next))
	var ns int64
	if !cp.Time.IsZero() {
		ns = cp.Time.UnixNano()
	}
	return binary.BigEndian.AppendUint64(b, uint64(ns))
}

func decodeCheckpoint(b []byte) (Checkpoint, bool) {
	if len(b) != 32 {
		return Checkpoint{}, false
	}
	var cp Checkpoint
	copy(cp.TopicID[:], b[:16])
	cp.Next = int64(binary.BigEndian.Uint64(b[16:24]))
	if ns := int64(binary.BigEndian.Uint64(b[24:32])); ns != 0 {
		cp.Time = time.Unix(0, ns)
	}
	return cp, true
}

// Range calls fn for every key in order until fn returns false. The slices
// are only valid during the call.
func (s *Store) Range(fn func(key, value []byte) bool) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: stateLower, UpperBound: stateUpper})
	if err != nil {
		return fmt.Errorf("store: iterate %s: %w", s.dir, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("store: iterate %s: %w", s.dir, err)
		}
		k := bytes.TrimPrefix(it.Key(), stateLower)
		if s.inline {
			if _, v, err = s.split(k, v); err != nil {
				it.Close()
				return err
			}
		}
		if !fn(k, v) {
			break
		}
	}
	return it.Close()
}

// Scan calls fn for the keys k with lo <= k < hi (hi nil: no upper
// bound), in ascending byte order, until fn returns false or an error,
// which Scan returns. The slices are only valid during the call. It may
// run concurrently with Get and other Scans.
func (s *Store) Scan(lo, hi []byte, fn func(key, value []byte) (bool, error)) error {
	o := &pebble.IterOptions{LowerBound: append([]byte{statePrefix}, lo...), UpperBound: stateUpper}
	if hi != nil {
		o.UpperBound = append([]byte{statePrefix}, hi...)
	}
	it, err := s.db.NewIter(o)
	if err != nil {
		return fmt.Errorf("store: scan %s: %w", s.dir, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("store: scan %s: %w", s.dir, err)
		}
		k := it.Key()[1:]
		if s.inline {
			if _, v, err = s.split(k, v); err != nil {
				it.Close()
				return err
			}
		}
		more, err := fn(k, v)
		if err != nil {
			it.Close()
			return err
		}
		if !more {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: scan %s: %w", s.dir, err)
	}
	return nil
}

// Close closes the database, marks the directory as used now (see Prune)
// and releases the lock. A second Close is a no-op.
func (s *Store) Close() error {
	if s == nil || s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	if err != nil {
		err = fmt.Errorf("store: close %s: %w", s.dir, err)
	}
	err = errors.Join(err, touch(s.dir))
	if lerr := s.lock.release(); lerr != nil {
		err = errors.Join(err, fmt.Errorf("store: releasing the lock of %s: %w", s.dir, lerr))
	}
	return err
}

// pebbleLogger sends Pebble's log lines to the store's logger: errors at
// Error, its informational chatter at Debug. Fatalf reports a broken Pebble
// invariant and does not return, like Pebble's own logger.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug("store: pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("store: pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "store: pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}
