package transformer

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestExpiryDue: an expiry is now + d rounded up to a multiple of d/64
// (at least 1ms), never before now + d and at most d/64 after it, for
// negative times too; near the end of time it is not rounded, and past it
// it is the end of time.
func TestExpiryDue(t *testing.T) {
	const d = 64 * time.Second // a span of 1s
	for _, tc := range []struct{ now, want int64 }{
		{0, 64_000},
		{1, 65_000},
		{999, 65_000},
		{1000, 65_000},
		{1001, 66_000},
		{-64_000, 0},
		{-64_001, 0},
		{-65_001, -1000},
		{-65_500, -1000},
		{math.MaxInt64 - 64_000 - 10, math.MaxInt64 - 10},
		{math.MaxInt64 - 5, math.MaxInt64},
	} {
		require.Equal(t, tc.want, expiryDue(tc.now, d), "now %d", tc.now)
	}
	require.Equal(t, int64(1063), expiryDue(1000, 63*time.Millisecond), "a span of 0ms is 1ms")
	for now := int64(-5000); now < 5000; now += 7 {
		for _, d := range []time.Duration{time.Millisecond, 100 * time.Millisecond, time.Hour} {
			due := expiryDue(now, d)
			require.GreaterOrEqual(t, due, now+d.Milliseconds())
			require.LessOrEqual(t, due, now+d.Milliseconds()+max(d.Milliseconds()/64, 1))
			require.Zero(t, due%max(d.Milliseconds()/64, 1))
		}
	}
}
