package stamp

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/task/process"
)

func TestRoundTrip(t *testing.T) {
	for _, s := range []process.Stamp{
		{Kind: process.EventTime, At: -5},
		{Kind: process.WallClock, At: 1 << 40},
		{Timers: []process.Timer{{Name: "a", Kind: process.EventTime, Due: 7}}},
		{Kind: process.EventTime, At: 3, Timers: []process.Timer{
			{Name: "session", Kind: process.WallClock, Due: -1},
			{Name: string(make([]byte, 300)), Kind: process.EventTime, Due: 1 << 62},
		}},
	} {
		b := Append([]byte("x"), s)
		require.Len(t, b, 1+Len(s))
		got, ok := Decode(b[1:])
		require.True(t, ok, "%+v", s)
		require.Equal(t, s, got)
		var buf [1]process.Timer
		got, ok = DecodeInto(b[1:], buf[:])
		require.True(t, ok)
		require.Equal(t, s, got)
		require.Equal(t, s.Kind, KindOf(b[1:]))
		for _, tm := range s.Timers {
			ct, ok := TimerOf(b[1:], tm.Name)
			require.True(t, ok)
			require.Equal(t, tm, ct)
		}
		_, ok = TimerOf(b[1:], "none")
		require.False(t, ok)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := Append(nil, process.Stamp{Kind: process.EventTime, At: 1, Timers: []process.Timer{{Name: "ab", Kind: process.EventTime, Due: 2}}})
	for name, b := range map[string][]byte{
		"empty":               nil,
		"short":               good[:8],
		"no clock, no timers": Append(nil, process.Stamp{At: 4}),
		"unknown clock":       append([]byte{9}, good[1:]...),
		"truncated timer":     good[:len(good)-1],
		"timer of no clock":   append(append([]byte{}, good[:9]...), append([]byte{0}, good[10:]...)...),
		"empty timer name":    append(append([]byte{}, good[:18]...), 0),
	} {
		_, ok := Decode(b)
		require.False(t, ok, name)
		require.Zero(t, KindOf(b), name)
		_, ok = TimerOf(b, "ab")
		require.False(t, ok, name)
	}
}

func TestDue(t *testing.T) {
	s := process.Stamp{Timers: []process.Timer{{Name: "a", Kind: process.EventTime, Due: 50}}}
	due := func(name string, kind process.TimeKind, d int64) string {
		k, d := Due(s, name, kind, d)
		return fmt.Sprint(k, d)
	}
	require.Equal(t, "1 50", due("a", process.EventTime, 10), "carried later: the stamp's")
	require.Equal(t, "1 60", due("a", process.EventTime, 60), "carried earlier: the record's")
	require.Equal(t, "1 50", due("a", process.WallClock, 90), "carried of another clock: the stamp's")
	require.Equal(t, "1 10", due("b", process.EventTime, 10), "not carried: the record's")
}
