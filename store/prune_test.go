package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/store"
)

func age(t *testing.T, path string, d time.Duration) {
	t.Helper()
	old := time.Now().Add(-d)
	require.NoError(t, os.Chtimes(path, old, old))
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if os.IsNotExist(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestPrune: of the stores of an application, Prune deletes those unused
// for longer than the age and keeps fresh ones, open ones whatever their
// age, and everything that is not a store.
func TestPrune(t *testing.T) {
	root := t.TempDir()
	const app = "app"
	appDir := filepath.Join(root, app)
	open := func(p int32) *store.Store {
		st, err := store.Open(context.Background(), store.Dir(root, app, p), store.Options{})
		require.NoError(t, err)
		return st
	}
	// 0: old, closed. 1: fresh, closed. 2: old but open. 3: closed
	// long ago, then used again (closed recently).
	for _, p := range []int32{0, 1, 3} {
		require.NoError(t, open(p).Close())
	}
	age(t, store.Dir(root, app, 0), 48*time.Hour)
	held := open(2)
	defer held.Close()
	age(t, store.Dir(root, app, 2), 48*time.Hour)
	age(t, store.Dir(root, app, 3), 48*time.Hour)
	require.NoError(t, open(3).Close())
	// A lock file whose store is gone, and entries that are no stores.
	orphan := filepath.Join(appDir, "7.lock")
	require.NoError(t, os.WriteFile(orphan, nil, 0o644))
	age(t, orphan, 48*time.Hour)
	foreign := filepath.Join(appDir, "notes")
	require.NoError(t, os.Mkdir(foreign, 0o755))
	age(t, foreign, 48*time.Hour)
	other := store.Dir(root, "other-app", 0)
	require.NoError(t, os.MkdirAll(other, 0o755))
	age(t, other, 48*time.Hour)

	removed, err := store.Prune(appDir, 24*time.Hour)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{store.Dir(root, app, 0), store.Dir(root, app, 7)}, removed)
	require.False(t, exists(t, store.Dir(root, app, 0)))
	require.False(t, exists(t, store.Dir(root, app, 0)+".lock"))
	require.False(t, exists(t, orphan))
	for _, p := range []int32{1, 2, 3} {
		require.True(t, exists(t, store.Dir(root, app, p)), "store %d", p)
		require.True(t, exists(t, store.Dir(root, app, p)+".lock"), "lock of store %d", p)
	}
	require.True(t, exists(t, foreign))
	require.True(t, exists(t, other))
	_, ok, err := held.Get([]byte("k"))
	require.NoError(t, err)
	require.False(t, ok)

	// Age 0 deletes every store nobody holds, and a pruned store opens
	// again.
	removed, err = store.Prune(appDir, 0)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{store.Dir(root, app, 1), store.Dir(root, app, 3)}, removed)
	require.True(t, exists(t, store.Dir(root, app, 2)))
	require.NoError(t, open(0).Close())

	removed, err = store.Prune(filepath.Join(root, "missing"), 0)
	require.NoError(t, err)
	require.Empty(t, removed)
}

// TestPruneNamedStores: the named stores of a task ({partition}.{name})
// and their lock files are pruned like default ones, each on its own;
// entries that only look like them are left alone.
func TestPruneNamedStores(t *testing.T) {
	root := t.TempDir()
	const app = "app"
	appDir := filepath.Join(root, app)
	require.Equal(t, filepath.Join(root, app, "3.counts"), store.NamedDir(root, app, 3, "counts"))
	open := func(dir string) *store.Store {
		st, err := store.Open(context.Background(), dir, store.Options{})
		require.NoError(t, err)
		return st
	}
	old := []string{store.Dir(root, app, 0), store.NamedDir(root, app, 0, "counts"), store.NamedDir(root, app, 0, "timers")}
	for _, dir := range old {
		require.NoError(t, open(dir).Close())
		age(t, dir, 48*time.Hour)
	}
	held := open(store.NamedDir(root, app, 1, "dedupe-set_2"))
	defer held.Close()
	age(t, store.NamedDir(root, app, 1, "dedupe-set_2"), 48*time.Hour)
	orphan := store.NamedDir(root, app, 2, "gone") + ".lock"
	require.NoError(t, os.WriteFile(orphan, nil, 0o644))
	age(t, orphan, 48*time.Hour)
	var foreign []string
	for _, name := range []string{"0.Counts", "0.", "0.-x", "x.counts", "0.a.b", "01.counts"} {
		p := filepath.Join(appDir, name)
		require.NoError(t, os.Mkdir(p, 0o755))
		age(t, p, 48*time.Hour)
		foreign = append(foreign, p)
	}

	removed, err := store.Prune(appDir, 24*time.Hour)
	require.NoError(t, err)
	require.ElementsMatch(t, append(old, store.NamedDir(root, app, 2, "gone")), removed)
	for _, dir := range old {
		require.False(t, exists(t, dir))
		require.False(t, exists(t, dir+".lock"))
	}
	require.False(t, exists(t, orphan))
	require.True(t, exists(t, store.NamedDir(root, app, 1, "dedupe-set_2")))
	for _, p := range foreign {
		require.True(t, exists(t, p), p)
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"counts": true, "timers": true, "a": true, "0": true, "a_b-c9": true,
		strings.Repeat("a", 64): true, strings.Repeat("a", 65): false,
		"": false, "A": false, "_a": false, "-a": false, "a.b": false, "a b": false,
		"lock": false, "é": false,
	} {
		require.Equal(t, want, store.ValidName(name), "%q", name)
	}
}
