package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// DefaultLockWait is how long Open waits for the lock of a store directory
// when Options.LockWait is zero.
const DefaultLockWait = 5 * time.Second

// lockPollInterval is how often a waiting opener tries the lock again.
const lockPollInterval = 25 * time.Millisecond

// ErrLocked matches every *LockedError: errors.Is(err, store.ErrLocked).
var ErrLocked = errors.New("store: directory locked by another opener")

// LockedError is returned by Open when another opener, in this process or
// another one, held the lock of the store directory for the whole wait.
// Open read, removed and wrote nothing: the other opener's store is intact.
// Retrying is safe once the other opener has closed its store; a lock that
// stays held means a second instance (or a paused zombie of an earlier one)
// uses the same state directory for the same task.
type LockedError struct {
	// Dir is the store directory; its lock file is Dir + ".lock".
	Dir string
	// Waited is how long Open waited for the lock.
	Waited time.Duration
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("store: %s is locked by another opener (lock file %s, waited %v): "+
		"another process or Store still holds this store, e.g. a second instance or a paused zombie owning the same task",
		e.Dir, lockPath(e.Dir), e.Waited.Round(time.Millisecond))
}

// Is reports whether target is ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// lockPath returns the lock file of a store directory. It lies beside the
// directory, so that wiping the directory never removes the lock.
func lockPath(dir string) string { return dir + ".lock" }

// dirLock is a held exclusive lock on a store directory: an open lock file
// with an flock(2) (LockFileEx on Windows) on it. The lock belongs to the
// open file, so two handles in one process exclude each other just as two
// processes do, and the kernel releases it when the process dies.
type dirLock struct {
	f *os.File
}

// tryLock takes the lock of dir without waiting. It returns (nil, nil) when
// another opener holds it.
func tryLock(dir string) (*dirLock, error) {
	path := lockPath(dir)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("store: lock file %s: %w", path, err)
		}
		held, err := lockFile(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("store: locking %s: %w", path, err)
		}
		if held {
			f.Close()
			return nil, nil
		}
		// Prune removes a lock file while holding its lock. A lock taken
		// on a file that was removed (or replaced) meanwhile guards
		// nothing: open the file at path again.
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("store: lock file %s: %w", path, err)
		}
		cur, err := os.Stat(path)
		if err == nil && os.SameFile(fi, cur) {
			return &dirLock{f: f}, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("store: lock file %s: %w", path, err)
		}
	}
}

// lock takes the lock of dir, trying again until wait has passed or ctx is
// done; then it returns a *LockedError (or ctx's error).
func lock(ctx context.Context, dir string, wait time.Duration) (*dirLock, error) {
	began := time.Now()
	deadline := began.Add(wait)
	for {
		l, err := tryLock(dir)
		if err != nil || l != nil {
			return l, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, &LockedError{Dir: dir, Waited: time.Since(began)}
		}
		t := time.NewTimer(min(left, lockPollInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("store: waiting for the lock of %s: %w", dir, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// release drops the lock. A second release is a no-op.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	// Closing the file releases the lock.
	err := l.f.Close()
	l.f = nil
	return err
}
