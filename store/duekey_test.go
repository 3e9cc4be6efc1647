package store

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDueKeyOrderAndRoundTrip: for random timers (keys and names rich in
// 0x00, 0x01 and 0xff bytes), an index entry decodes to its key and name,
// and entries compare bytewise as CompareDue compares their timers.
func TestDueKeyOrderAndRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0x00, 0x01, 0xff, 'a', 'b'}
	gen := func(min int) []byte {
		b := make([]byte, min+rng.IntN(4))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return b
	}
	type timer struct {
		due  int64
		key  []byte
		name string
	}
	rnd := func() timer { return timer{int64(rng.IntN(3) - 1), gen(1), string(gen(0))} }
	sign := func(c int) int { return max(-1, min(1, c)) }
	for range 20000 {
		a, b := rnd(), rnd()
		ka, kb := dueKey(nil, 1, a.due, a.key, a.name), dueKey(nil, 1, b.due, b.key, b.name)
		key, name, ok := parseDueKey(ka[10:])
		require.True(t, ok)
		require.Equal(t, a.key, key)
		require.Equal(t, a.name, name)
		require.Equal(t, CompareDue(a.due, a.key, a.name, b.due, b.key, b.name), sign(bytes.Compare(ka, kb)), "%+v %+v", a, b)
	}
	for _, bad := range [][]byte{{'a'}, {'a', 0x00}, {'a', 0x00, 0x02}} {
		_, _, ok := parseDueKey(bad)
		require.False(t, ok, "%x", bad)
	}
}
