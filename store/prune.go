package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Prune deletes the stores under appDir ({state dir}/{application id}) that
// nobody holds and that were last opened or closed more than maxAge ago,
// together with their lock files; maxAge 0 deletes every store nobody
// holds. It returns the directories it deleted.
//
// Only the entries a store creates are considered: directories named by a
// partition number (Dir) or by a partition number, a dot and a store name
// (NamedDir), and their ".lock" files. Each store of a task is pruned on
// its own. A store is deleted only under
// its lock, taken without waiting: a store that is open, or being opened,
// is skipped, whatever its age. A missing appDir is not an error. Errors
// about single stores do not stop the others; they are returned joined.
func Prune(appDir string, maxAge time.Duration) ([]string, error) {
	entries, err := os.ReadDir(appDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: pruning %s: %w", appDir, err)
	}
	// Store directories, and lock files left without one (a crash between
	// removing a store and its lock file).
	var dirs []string
	seen := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() && isStoreDir(name) {
			dirs = append(dirs, name)
			seen[name] = true
		}
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".lock")
		if ok && e.Type().IsRegular() && isStoreDir(name) && !seen[name] {
			dirs = append(dirs, name)
		}
	}
	var removed []string
	var errs []error
	for _, name := range dirs {
		dir := filepath.Join(appDir, name)
		ok, err := pruneOne(dir, maxAge)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}

// pruneOne deletes the store in dir if nobody holds it and it is older than
// maxAge.
func pruneOne(dir string, maxAge time.Duration) (bool, error) {
	if !unusedFor(dir, maxAge) {
		return false, nil
	}
	l, err := tryLock(dir)
	if err != nil || l == nil {
		return false, err
	}
	defer l.release()
	// Check again under the lock: the store may have been used between
	// the first look and the lock.
	if !unusedFor(dir, maxAge) {
		return false, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("store: pruning %s: %w", dir, err)
	}
	// Remove the lock file while holding its lock; an opener that locked
	// the removed file notices and opens a new one (see tryLock).
	if err := os.Remove(lockPath(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, fmt.Errorf("store: pruning %s: %w", lockPath(dir), err)
	}
	return true, nil
}

// unusedFor reports whether the store in dir (or its lock file, when the
// directory is gone) was last modified more than maxAge ago.
func unusedFor(dir string, maxAge time.Duration) bool {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		fi, err = os.Stat(lockPath(dir))
	}
	if err != nil {
		return false
	}
	return time.Since(fi.ModTime()) > maxAge
}

// isStoreDir reports whether name is the base name of a store directory:
// a partition number (Dir) or "{partition}.{store name}" (NamedDir).
func isStoreDir(name string) bool {
	p, store, named := strings.Cut(name, ".")
	return isPartition(p) && (!named || ValidName(store))
}

// ValidName reports whether name can name a store (NamedDir): 1 to 64
// characters of a-z, 0-9, '_' and '-', the first a letter or digit, and
// not "lock" ({partition}.lock is the default store's lock file).
// "timers" is valid here; it names the timer store.
func ValidName(name string) bool {
	if name == "" || len(name) > 64 || name == "lock" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// isPartition reports whether name is a partition number, as Dir writes it.
func isPartition(name string) bool {
	n, err := strconv.ParseInt(name, 10, 32)
	return err == nil && n >= 0 && strconv.FormatInt(n, 10) == name
}
