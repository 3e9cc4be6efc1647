package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/store"
)

// TestStampFollowsItsValue: a put's stamp is read back with StampOf until
// the key's next write: a put with another stamp replaces it, a put
// without one or a delete drops it; stamps survive a reopen, are not
// state keys, and a Reset wipes them. Both in a new store (layout 2: the
// stamp ahead of the value) and in a layout 1 store (the stamp under its
// own key).
func TestStampFollowsItsValue(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "app", "0")
			if legacy {
				legacyStore(t, dir)
			}
			stampFollowsItsValue(t, dir)
		})
	}
}

// legacyStore writes in dir the metadata of a layout 1 store of
// application "app".
func legacyStore(t *testing.T, dir string) {
	t.Helper()
	m, err := json.Marshal(map[string]any{"layout": 1, "application_id": "app"})
	require.NoError(t, err)
	db, err := pebble.Open(dir, &pebble.Options{})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte{0x00, 'm'}, m, pebble.Sync))
	require.NoError(t, db.Close())
}

func stampFollowsItsValue(t *testing.T, dir string) {
	o := store.Options{ApplicationID: "app"}
	st, err := store.Open(context.Background(), dir, o)
	require.NoError(t, err)
	stampOf := func(k string) string {
		t.Helper()
		b, ok, err := st.StampOf([]byte(k))
		require.NoError(t, err)
		// GetStamped reads the same stamp with the value.
		v, gs, found, err := st.GetStamped([]byte(k))
		require.NoError(t, err)
		want, wantFound, err := st.Get([]byte(k))
		require.NoError(t, err)
		require.Equal(t, wantFound, found)
		require.Equal(t, string(want), string(v))
		require.Equal(t, string(b), string(gs))
		if !ok {
			return "-"
		}
		return string(b)
	}
	require.Equal(t, "-", stampOf("a"), "a new store has no stamp")
	require.NoError(t, st.Apply([]store.Write{
		{Key: []byte("a"), Value: []byte("1"), Stamp: []byte("s1")},
		{Key: []byte("b"), Value: []byte("2"), Stamp: []byte("s2")},
		{Key: []byte("c"), Value: []byte("3"), Stamp: []byte("s3")},
		{Key: []byte("d"), Value: []byte("4")},
	}))
	require.Equal(t, []string{"s1", "s2", "s3", "-"}, []string{stampOf("a"), stampOf("b"), stampOf("c"), stampOf("d")})
	require.NoError(t, st.Apply([]store.Write{
		{Key: []byte("a"), Value: []byte("5"), Stamp: []byte("s5")},
		{Key: []byte("b"), Value: []byte("6")},
		{Key: []byte("c"), Delete: true},
	}))
	require.Equal(t, []string{"s5", "-", "-"}, []string{stampOf("a"), stampOf("b"), stampOf("c")})
	require.NoError(t, st.Close())

	st, err = store.Open(context.Background(), dir, o)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	require.Equal(t, "s5", stampOf("a"), "a stamp survives a reopen")
	require.NoError(t, st.Apply([]store.Write{{Key: []byte("a"), Value: []byte("7")}}))
	require.Equal(t, "-", stampOf("a"), "after a reopen, a put without a stamp still drops it")
	require.NoError(t, st.Apply([]store.Write{{Key: []byte("e"), Value: []byte("8"), Stamp: []byte("s8")}}))
	got := map[string]string{}
	require.NoError(t, st.Range(func(k, v []byte) bool { got[string(k)] = string(v); return true }))
	require.Equal(t, map[string]string{"a": "7", "b": "6", "d": "4", "e": "8"}, got, "stamps are not state keys")
	require.NoError(t, st.Reset([16]byte{1}))
	require.Equal(t, "-", stampOf("e"), "a reset wipes the stamps")
	require.NoError(t, st.Apply([]store.Write{{Key: []byte("f"), Value: []byte("9"), Stamp: []byte("s9")}}))
	require.Equal(t, "s9", stampOf("f"), "stamps after a reset")
	require.NoError(t, st.Apply([]store.Write{{Key: []byte("f"), Value: []byte("9"), Stamp: []byte{}}}))
	require.Equal(t, "-", stampOf("f"), "an empty stamp is none")
	v, ok, err := st.Get([]byte("f"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "9", string(v))
}

// TestInlineStampKeepsValues: in a new store a stamp shares its value's
// Pebble key, and Get, Range and Scan return the value without it, also
// an empty value and a value that looks like a stamp header.
func TestInlineStampKeepsValues(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir, store.Options{ApplicationID: "app"})
	require.NoError(t, err)
	long := bytes.Repeat([]byte("s"), 300) // a two-byte length
	ws := []store.Write{
		{Key: []byte("a"), Value: []byte("1"), Stamp: []byte("s1")},
		{Key: []byte("b"), Value: []byte{}, Stamp: long},
		{Key: []byte("c"), Value: []byte{0x05, 'x'}},
		{Key: []byte("d"), Value: []byte("4"), Stamp: []byte{}},
	}
	require.NoError(t, st.Apply(ws))
	want := map[string]string{"a": "1", "b": "", "c": "\x05x", "d": "4"}
	got := map[string]string{}
	for k := range want {
		v, ok, err := st.Get([]byte(k))
		require.NoError(t, err)
		require.True(t, ok, k)
		got[k] = string(v)
	}
	require.Equal(t, want, got, "Get")
	got = map[string]string{}
	require.NoError(t, st.Range(func(k, v []byte) bool { got[string(k)] = string(v); return true }))
	require.Equal(t, want, got, "Range")
	got = map[string]string{}
	require.NoError(t, st.Scan([]byte("b"), nil, func(k, v []byte) (bool, error) { got[string(k)] = string(v); return true, nil }))
	require.Equal(t, map[string]string{"b": "", "c": "\x05x", "d": "4"}, got, "Scan")
	b, ok, err := st.StampOf([]byte("b"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, long, b)
	_, ok, err = st.StampOf([]byte("d"))
	require.NoError(t, err)
	require.False(t, ok, "an empty stamp is none")
	require.NoError(t, st.Close())

	db, err := pebble.Open(dir, &pebble.Options{})
	require.NoError(t, err)
	n := 0
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{0x01}})
	require.NoError(t, err)
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	require.NoError(t, it.Close())
	defer db.Close()
	require.Equal(t, len(ws), n, "one Pebble key per state key: no stamp keys")
	m, closer, err := db.Get([]byte{0x00, 'm'})
	require.NoError(t, err)
	require.Contains(t, string(m), `"layout":2`, "a version that reads layout 1 only wipes this store")
	require.NoError(t, closer.Close())
}

// TestInlineStampBrokenHeader: a value in a new store without a stamp
// header fails Get, StampOf, Range and Scan with an error naming the key
// and the store.
func TestInlineStampBrokenHeader(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir, store.Options{ApplicationID: "app"})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	db, err := pebble.Open(dir, &pebble.Options{})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte("\x01k"), []byte{0x09, 'x'}, pebble.Sync)) // says 9 stamp bytes, has 1
	require.NoError(t, db.Close())
	st, err = store.Open(context.Background(), dir, store.Options{ApplicationID: "app"})
	require.NoError(t, err)
	defer st.Close()
	_, _, err = st.Get([]byte("k"))
	require.ErrorContains(t, err, `value of "k" in `+dir+": no stamp header")
	_, _, err = st.StampOf([]byte("k"))
	require.ErrorContains(t, err, "no stamp header")
	require.ErrorContains(t, st.Range(func(_, _ []byte) bool { return true }), "no stamp header")
	require.ErrorContains(t, st.Scan(nil, nil, func(_, _ []byte) (bool, error) { return true, nil }), "no stamp header")
}

// TestPrepareKeepsEarlierTimerOverHint: a hint (Write.Hint) is dropped
// when its timer is due no later with the same clock, and kept when the
// timer is absent, due later or of the other clock; a hint after a write
// of the same batch is judged against what that write left.
func TestPrepareKeepsEarlierTimerOverHint(t *testing.T) {
	st := openTimers(t, t.TempDir())
	defer st.Close()
	key := func(k string) []byte { return store.TimerKey([]byte(k), "\x00ttl") }
	require.NoError(t, st.Apply([]store.Write{
		{Key: key("early"), Value: store.TimerValue(eventTime, 10)},
		{Key: key("same"), Value: store.TimerValue(eventTime, 20)},
		{Key: key("late"), Value: store.TimerValue(eventTime, 50)},
		{Key: key("wall"), Value: store.TimerValue(wallClock, 10)},
		{Key: key("gone"), Value: store.TimerValue(eventTime, 10)},
	}))
	ws := []store.Write{
		{Key: key("early"), Value: store.TimerValue(eventTime, 30), Hint: true}, // 10 stays: dropped
		{Key: key("same"), Value: store.TimerValue(eventTime, 20), Hint: true},  // dropped
		{Key: key("late"), Value: store.TimerValue(eventTime, 30), Hint: true},  // earlier: kept
		{Key: key("wall"), Value: store.TimerValue(eventTime, 30), Hint: true},  // another clock: kept
		{Key: key("new"), Value: store.TimerValue(eventTime, 30), Hint: true},   // absent: kept
		{Key: key("gone"), Delete: true},                                        // kept
		{Key: key("gone"), Value: store.TimerValue(eventTime, 40), Hint: true},  // absent after the delete: kept
	}
	p, err := st.Prepare(ws)
	require.NoError(t, err)
	require.Equal(t, []store.Write{ws[2], ws[3], ws[4], ws[5], ws[6]}, p.Writes())
	require.NoError(t, st.ApplyPrepared(p))
	requireIndexExact(t, st, map[string][]byte{
		string(key("early")): store.TimerValue(eventTime, 10), string(key("same")): store.TimerValue(eventTime, 20),
		string(key("late")): store.TimerValue(eventTime, 30), string(key("wall")): store.TimerValue(eventTime, 30),
		string(key("new")): store.TimerValue(eventTime, 30), string(key("gone")): store.TimerValue(eventTime, 40),
	})
}

// TestStampDroppedWithinOneApply: a restore applies a fetch of
// several records of one key in one batch; a put without a stamp after a
// stamped put of the same batch must drop the stamp, as two batches do.
func TestStampDroppedWithinOneApply(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{ApplicationID: "app"})
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.Apply([]store.Write{
		{Key: []byte("a"), Value: []byte("1"), Stamp: []byte("s1")},
		{Key: []byte("a"), Value: []byte("2")},
		{Key: []byte("b"), Value: []byte("1"), Stamp: []byte("s1")},
		{Key: []byte("b"), Delete: true},
	}))
	_, ok, err := st.StampOf([]byte("a"))
	require.NoError(t, err)
	require.False(t, ok, "a's last put had no stamp")
	_, ok, err = st.StampOf([]byte("b"))
	require.NoError(t, err)
	require.False(t, ok, "b was deleted")
}
