package store_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/store"
)

// killChildEnv makes the test binary a child that commits batches to the
// store named by the variable until it is killed (commitForever).
const killChildEnv = "FLECHTWERK_STORE_KILL_CHILD"

// commitForever opens dir and applies batch after batch: batch i puts
// "b{i}" and sets "last" to i, with the checkpoint i+1. After 200 batches
// it says "ready" and goes on.
func commitForever(dir string) int {
	st, err := store.Open(context.Background(), dir, store.Options{ApplicationID: "app"})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := st.Reset([16]byte{1}); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	val := bytes.Repeat([]byte("v"), 100)
	for i := 0; ; i++ {
		ws := []store.Write{
			{Key: fmt.Appendf(nil, "b%d", i), Value: val},
			{Key: []byte("last"), Value: strconv.AppendInt(nil, int64(i), 10)},
		}
		if i > 0 {
			// A delete in every batch: the previous batch's extra key.
			ws = append(ws, store.Write{Key: fmt.Appendf(nil, "x%d", i-1), Delete: true})
		}
		ws = append(ws, store.Write{Key: fmt.Appendf(nil, "x%d", i), Value: val})
		if err := st.ApplyThrough(ws, int64(i+1)); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		if i == 200 {
			fmt.Println("ready")
		}
	}
}

// TestSIGKILLLeavesCheckpointConsistent kills a process in the middle of
// applying batches and reopens its store: the checkpoint and the state
// belong to the same batch (every batch below the checkpoint is there,
// none above), and no ApplyThrough that returned is lost (it syncs).
func TestSIGKILLLeavesCheckpointConsistent(t *testing.T) {
	for round := range 3 {
		dir := filepath.Join(t.TempDir(), "app", "0")
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), killChildEnv+"="+dir)
		child.Stderr = os.Stderr
		stdout, err := child.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, child.Start())
		out := bufio.NewScanner(stdout)
		require.True(t, out.Scan(), "child output")
		require.Equal(t, "ready", out.Text())
		time.Sleep(time.Duration(100*round) * time.Millisecond)
		require.NoError(t, child.Process.Signal(syscall.SIGKILL))
		_ = child.Wait()

		st, err := store.Open(context.Background(), dir, store.Options{ApplicationID: "app"})
		require.NoError(t, err)
		cp, ok := st.Checkpoint()
		require.True(t, ok, "checkpoint after SIGKILL")
		require.Equal(t, [16]byte{1}, cp.TopicID)
		require.Greater(t, cp.Next, int64(200), "batches applied before ready survive")
		last, ok, err := st.Get([]byte("last"))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, strconv.FormatInt(cp.Next-1, 10), string(last), "state and checkpoint of one batch")
		n := 0
		require.NoError(t, st.Range(func(k, _ []byte) bool {
			switch {
			case k[0] == 'b':
				i, err := strconv.ParseInt(string(k[1:]), 10, 64)
				require.NoError(t, err)
				require.Less(t, i, cp.Next, "a batch above the checkpoint: %s", k)
				n++
			case k[0] == 'x':
				require.Equal(t, fmt.Sprintf("x%d", cp.Next-1), string(k), "only the last batch's extra key")
			}
			return true
		}))
		require.Equal(t, int(cp.Next), n, "every batch below the checkpoint")
		t.Logf("round %d: checkpoint %d after SIGKILL", round, cp.Next)
		require.NoError(t, st.Close())
	}
}

// TestCheckpointSurvivesReopen: state and checkpoint written by
// ApplyThrough and ApplyCheckpoint are there after Close and Open; Apply
// leaves the checkpoint alone.
func TestCheckpointSurvivesReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "app", "3")
	o := store.Options{ApplicationID: "app"}
	st, err := store.Open(context.Background(), dir, o)
	require.NoError(t, err)
	_, ok := st.Checkpoint()
	require.False(t, ok, "a new store has no checkpoint")
	id := [16]byte{9, 9}
	require.NoError(t, st.Reset(id))
	at := time.Now().Add(-time.Minute).Truncate(time.Nanosecond)
	require.NoError(t, st.ApplyCheckpoint([]store.Write{{Key: []byte("a"), Value: []byte("1")}}, store.Checkpoint{TopicID: id, Next: 7, Time: at}))
	require.NoError(t, st.ApplyThrough([]store.Write{{Key: []byte("b"), Value: []byte("2")}, {Key: []byte("a"), Delete: true}}, 12))
	require.NoError(t, st.Apply([]store.Write{{Key: []byte("c"), Value: []byte("3")}}))
	require.NoError(t, st.Close())

	st, err = store.Open(context.Background(), dir, o)
	require.NoError(t, err)
	defer st.Close()
	cp, ok := st.Checkpoint()
	require.True(t, ok)
	require.Equal(t, id, cp.TopicID)
	require.Equal(t, int64(12), cp.Next)
	require.WithinDuration(t, time.Now(), cp.Time, 10*time.Second)
	got := map[string]string{}
	require.NoError(t, st.Range(func(k, v []byte) bool { got[string(k)] = string(v); return true }))
	require.Equal(t, map[string]string{"b": "2", "c": "3"}, got, "metadata and checkpoint are not state keys")
}

// TestOpenWipesUntrustedStore: a store of another application id, of an
// unknown layout or of none (no metadata), or files Pebble cannot open, are
// wiped by Open, with a log line naming the reason.
func TestOpenWipesUntrustedStore(t *testing.T) {
	rawPebble := func(t *testing.T, dir string, kvs ...[]byte) {
		db, err := pebble.Open(dir, &pebble.Options{})
		require.NoError(t, err)
		for i := 0; i < len(kvs); i += 2 {
			require.NoError(t, db.Set(kvs[i], kvs[i+1], pebble.Sync))
		}
		require.NoError(t, db.Close())
	}
	meta := func(layout int, app string) []byte {
		b, err := json.Marshal(map[string]any{"layout": layout, "application_id": app})
		require.NoError(t, err)
		return b
	}
	metaKey := []byte{0x00, 'm'}
	tests := []struct {
		name   string
		leave  func(t *testing.T, dir string)
		reason string
	}{
		{"another application id", func(t *testing.T, dir string) {
			st, err := store.Open(context.Background(), dir, store.Options{ApplicationID: "other"})
			require.NoError(t, err)
			require.NoError(t, st.Reset([16]byte{1}))
			require.NoError(t, st.ApplyThrough([]store.Write{{Key: []byte("k"), Value: []byte("other")}}, 5))
			require.NoError(t, st.Close())
		}, "belongs to application id"},
		{"no metadata (layout 0)", func(t *testing.T, dir string) {
			rawPebble(t, dir, []byte("k"), []byte("old"))
		}, "no metadata"},
		{"older layout version", func(t *testing.T, dir string) {
			rawPebble(t, dir, metaKey, meta(0, "app"), []byte{0x01, 'k'}, []byte("old"))
		}, "layout version 0"},
		{"newer layout version", func(t *testing.T, dir string) {
			rawPebble(t, dir, metaKey, meta(3, "app"), []byte{0x01, 'k'}, []byte("old"))
		}, "layout version 3"},
		{"not a pebble store", func(t *testing.T, dir string) {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "CURRENT"), []byte("garbage\n"), 0o644))
		}, "pebble cannot open it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "app", "0")
			tc.leave(t, dir)
			var logs syncBuffer
			st, err := store.Open(context.Background(), dir, store.Options{
				ApplicationID: "app",
				Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
			})
			require.NoError(t, err)
			defer st.Close()
			_, ok := st.Checkpoint()
			require.False(t, ok, "no checkpoint after the wipe")
			_, found, err := st.Get([]byte("k"))
			require.NoError(t, err)
			require.False(t, found, "the old state is gone")
			require.Contains(t, logs.String(), "wiping a store that cannot be trusted")
			require.Contains(t, logs.String(), tc.reason)
			require.Contains(t, logs.String(), dir)
		})
	}
}

// TestOpenKeepsLayout1Store: a store written before timer stores existed
// (metadata {"layout":1,"application_id":...} and nothing else) is kept
// with its state and checkpoint by a default Open, and its metadata is
// not rewritten.
func TestOpenKeepsLayout1Store(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "app", "0")
	old, err := json.Marshal(map[string]any{"layout": 1, "application_id": "app"})
	require.NoError(t, err)
	db, err := pebble.Open(dir, &pebble.Options{})
	require.NoError(t, err)
	cp := make([]byte, 32)
	cp[0], cp[23] = 7, 42 // topic ID 07..., next 42, no time
	for _, kv := range [][2][]byte{{{0x00, 'm'}, old}, {{0x00, 'c'}, cp}, {{0x01, 'k'}, []byte("v")}} {
		require.NoError(t, db.Set(kv[0], kv[1], pebble.Sync))
	}
	require.NoError(t, db.Close())

	var logs syncBuffer
	st, err := store.Open(context.Background(), dir, store.Options{ApplicationID: "app", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	got, ok := st.Checkpoint()
	require.True(t, ok)
	require.Equal(t, int64(42), got.Next)
	v, found, err := st.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "v", string(v))
	require.NotContains(t, logs.String(), "wiping")
	require.NoError(t, st.Close())

	db, err = pebble.Open(dir, &pebble.Options{})
	require.NoError(t, err)
	defer db.Close()
	m, closer, err := db.Get([]byte{0x00, 'm'})
	require.NoError(t, err)
	defer closer.Close()
	require.Equal(t, string(old), string(m))
}
