package store_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

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

// TestPebbleErrorsGoToLogger makes Pebble fail a background flush (its
// directory is removed under it) and expects the error line in the logger
// given to Open, not in slog.Default.
func TestPebbleErrorsGoToLogger(t *testing.T) {
	var got, dflt syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&dflt, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	dir := filepath.Join(t.TempDir(), "app", "0")
	st, err := store.Open(context.Background(), dir, store.Options{
		Logger: slog.New(slog.NewTextHandler(&got, nil)),
	})
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(dir))

	// More than a memtable (4 MiB by default): Pebble flushes in the
	// background and fails to create the table.
	val := bytes.Repeat([]byte("v"), 64<<10)
	for i := range 128 {
		require.NoError(t, st.Apply([]store.Write{{Key: fmt.Appendf(nil, "k%04d", i), Value: val}}))
	}
	require.Eventually(t, func() bool {
		return bytes.Contains([]byte(got.String()), []byte("level=ERROR msg=\"store: pebble: "))
	}, 10*time.Second, 20*time.Millisecond, "logger got %q", got.String())
	require.Contains(t, got.String(), "store="+dir)
	require.NotContains(t, dflt.String(), "pebble")
	_ = st.Close()
}
