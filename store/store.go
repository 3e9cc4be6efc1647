package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

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

// Store is one task's Pebble database.
type Store struct {
	dir string
	db  *pebble.DB
}

// Open wipes dir and opens an empty store there. The store is rebuilt from
// the changelog after every open: local files are never trusted, since they
// may hold state that a crashed owner applied after a transaction whose
// outcome it never learned, or miss state another owner committed since.
func Open(dir string) (*Store, error) {
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
		Logger:     quiet{},
	})
	if err != nil {
		return nil, fmt.Errorf("store: opening %s: %w", dir, err)
	}
	return &Store{dir: dir, db: db}, nil
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

// Close closes the database. A second Close is a no-op.
func (s *Store) Close() error {
	if s == nil || s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	if err != nil {
		return fmt.Errorf("store: close %s: %w", s.dir, err)
	}
	return nil
}

// quiet keeps Pebble's informational chatter out of the application's
// output; errors go to the default slog logger. Fatalf reports a broken
// Pebble invariant and does not return, like Pebble's own logger.
type quiet struct{}

func (quiet) Infof(string, ...any) {}

func (quiet) Errorf(format string, args ...any) {
	slog.Error("store: pebble: " + fmt.Sprintf(format, args...))
}

func (quiet) Fatalf(format string, args ...any) {
	panic("store: pebble: " + fmt.Sprintf(format, args...))
}
