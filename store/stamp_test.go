package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/store"
)

// TestStampFollowsItsValue: a put's stamp is read back with StampOf until
// the key's next write: a put with another stamp replaces it, a put
// without one or a delete drops it; stamps survive a reopen, are not
// state keys, and a Reset wipes them.
func TestStampFollowsItsValue(t *testing.T) {
	dir := t.TempDir()
	o := store.Options{ApplicationID: "app"}
	st, err := store.Open(context.Background(), dir, o)
	require.NoError(t, err)
	stampOf := func(k string) string {
		t.Helper()
		b, ok, err := st.StampOf([]byte(k))
		require.NoError(t, err)
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
