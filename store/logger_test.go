package store_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/store"
)

// syncBuffer is a bytes.Buffer safe for Pebble's background goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestPebbleLogsGoToLogger reopens a store whose WAL holds writes: Pebble
// reports replaying it, and the line goes to the logger given to Open, at
// Debug, not to slog.Default. (Pebble's errors take the same path at Error;
// a failed background write with the WAL on is fatal in Pebble, so it is
// not provoked here.)
func TestPebbleLogsGoToLogger(t *testing.T) {
	var got, dflt syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&dflt, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	dir := filepath.Join(t.TempDir(), "app", "0")
	o := store.Options{Logger: slog.New(slog.NewTextHandler(&got, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	st, err := store.Open(context.Background(), dir, o)
	require.NoError(t, err)
	val := bytes.Repeat([]byte("v"), 1<<10)
	for i := range 16 {
		require.NoError(t, st.Apply([]store.Write{{Key: fmt.Appendf(nil, "k%04d", i), Value: val}}))
	}
	require.NoError(t, st.Close())
	st, err = store.Open(context.Background(), dir, o)
	require.NoError(t, err)
	defer st.Close()
	require.Contains(t, got.String(), "level=DEBUG msg=\"store: pebble: ")
	require.Contains(t, got.String(), "WAL")
	require.Contains(t, got.String(), "store="+dir)
	require.NotContains(t, dflt.String(), "pebble")
}
