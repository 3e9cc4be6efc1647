package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/store"
)

// childEnv makes the test binary a child that holds a store: it opens the
// store named by the variable, writes a key and a marker file, says
// "ready", and on every line from stdin reports whether its key is still
// there; at the end of stdin it closes the store and exits.
const childEnv = "FLECHTWERK_STORE_LOCK_CHILD"

const marker = "held-by-child"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(holdStore(dir))
	}
	if dir := os.Getenv(killChildEnv); dir != "" {
		os.Exit(commitForever(dir))
	}
	os.Exit(m.Run())
}

func holdStore(dir string) int {
	st, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := st.Apply([]store.Write{{Key: []byte("k"), Value: []byte("child")}}); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(dir, marker), nil, 0o644); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		v, ok, err := st.Get([]byte("k"))
		fmt.Printf("get %q %v %v\n", v, ok, err)
	}
	if err := st.Close(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	return 0
}

// TestLockAcrossProcesses: a store held by another process cannot be
// opened; the failed Open names the directory and leaves the other
// process's files alone. Once that process has exited, Open succeeds.
func TestLockAcrossProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "app", "0")
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+dir)
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	out := bufio.NewScanner(stdout)
	require.True(t, out.Scan(), "child output")
	require.Equal(t, "ready", out.Text())

	began := time.Now()
	st, err := store.Open(context.Background(), dir, store.Options{LockWait: 300 * time.Millisecond})
	require.Nil(t, st)
	require.ErrorIs(t, err, store.ErrLocked)
	var le *store.LockedError
	require.True(t, errors.As(err, &le))
	require.Equal(t, dir, le.Dir)
	require.Contains(t, err.Error(), dir)
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "Open waits LockWait")

	// Nothing of the child's store was removed, and it still reads its key.
	_, err = os.Stat(filepath.Join(dir, marker))
	require.NoError(t, err, "the failed Open wiped the child's store")
	_, err = io.WriteString(stdin, "get\n")
	require.NoError(t, err)
	require.True(t, out.Scan())
	require.Equal(t, `get "child" true <nil>`, out.Text())

	require.NoError(t, stdin.Close())
	require.NoError(t, child.Wait())
	st, err = store.Open(context.Background(), dir, store.Options{LockWait: -1})
	require.NoError(t, err)
	defer st.Close()
	v, found, err := st.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, found, "a new owner keeps the store (its restore decides whether to trust it)")
	require.Equal(t, "child", string(v))
}

// TestLockWithinProcess: two Stores of one directory in one process
// exclude each other too, and a waiting Open gets the directory as soon as
// the holder closes it.
func TestLockWithinProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "app", "3")
	a, err := store.Open(context.Background(), dir, store.Options{})
	require.NoError(t, err)
	require.NoError(t, a.Apply([]store.Write{{Key: []byte("k"), Value: []byte("a")}}))

	_, err = store.Open(context.Background(), dir, store.Options{LockWait: -1})
	require.ErrorIs(t, err, store.ErrLocked)
	v, ok, err := a.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "a", string(v))

	// A canceled wait ends with the context's error.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = store.Open(ctx, dir, store.Options{LockWait: time.Minute})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Handover: the holder closes while the next opener waits.
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = a.Close()
	}()
	b, err := store.Open(context.Background(), dir, store.Options{})
	require.NoError(t, err)
	v, ok, err = b.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, ok, "the next opener keeps the store")
	require.Equal(t, "a", string(v))
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "a second Close is a no-op")
	_, err = os.Stat(dir + ".lock")
	require.NoError(t, err, "the lock file lies beside the store")
}
