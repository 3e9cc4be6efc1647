package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Dir returns the directory of the store of one task:
// {stateDir}/{applicationID}/{partition}.
func Dir(stateDir, applicationID string, partition int32) string {
	return filepath.Join(stateDir, applicationID, strconv.Itoa(int(partition)))
}

// Write is one committed state change: a put of Value, or a delete when
// Delete is set.
type Write struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// Options configures Open. The zero value is ready to use.
type Options struct {
	// LockWait bounds how long Open waits for another opener of the same
	// directory to close it, e.g. the previous owner of a task that moved
	// within this process and is still closing. Default (zero)
	// DefaultLockWait, 5s; negative: do not wait.
	LockWait time.Duration
	// Logger receives Pebble's own log lines: errors at Error level,
	// informational lines at Debug. Default: discard.
	Logger *slog.Logger
}

// Store is one task's Pebble database.
type Store struct {
	dir  string
	db   *pebble.DB
	lock *dirLock
}

// Open takes the exclusive lock of dir, then wipes dir and opens an empty
// store there. The lock is a file beside the directory, dir + ".lock"; it
// is taken before anything in dir is read, removed or written, held until
// Close, and released by the kernel if the process dies. When another
// opener (another process, or another Store in this one) holds it, Open
// tries again until o.LockWait has passed and then returns a *LockedError
// (errors.Is(err, ErrLocked)), having touched nothing.
//
// The store is rebuilt from the changelog after every open: local files are
// never trusted, since they may hold state that a crashed owner applied
// after a transaction whose outcome it never learned, or miss state another
// owner committed since.
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
	st, err := open(dir, logger)
	if err != nil {
		l.release()
		return nil, err
	}
	st.lock = l
	return st, nil
}

// open wipes dir and opens Pebble there; the caller holds the lock.
func open(dir string, logger *slog.Logger) (*Store, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("store: wiping %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: creating %s: %w", dir, err)
	}
	db, err := pebble.Open(dir, &pebble.Options{
		// The changelog is the durable copy; a lost store is restored
		// from it, so the local WAL buys nothing.
		DisableWAL: true,
		Logger:     pebbleLogger{l: logger.With("store", dir)},
	})
	if err != nil {
		return nil, fmt.Errorf("store: opening %s: %w", dir, err)
	}
	if err := touch(dir); err != nil {
		db.Close()
		return nil, err
	}
	return &Store{dir: dir, db: db}, nil
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

// Get returns a copy of the value of key and whether it exists.
func (s *Store) Get(key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: get %q in %s: %w", key, s.dir, err)
	}
	out := append(make([]byte, 0, len(v)), v...)
	return out, true, closer.Close()
}

// Apply writes ws atomically (one Pebble batch).
func (s *Store) Apply(ws []Write) error {
	if len(ws) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, w := range ws {
		var err error
		if w.Delete {
			err = b.Delete(w.Key, nil)
		} else {
			err = b.Set(w.Key, w.Value, nil)
		}
		if err != nil {
			return fmt.Errorf("store: batch in %s: %w", s.dir, err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("store: commit in %s: %w", s.dir, err)
	}
	return nil
}

// Range calls fn for every key in order until fn returns false. The slices
// are only valid during the call.
func (s *Store) Range(fn func(key, value []byte) bool) error {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("store: iterate %s: %w", s.dir, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("store: iterate %s: %w", s.dir, err)
		}
		if !fn(it.Key(), v) {
			break
		}
	}
	return it.Close()
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
