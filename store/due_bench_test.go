package store_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/store"
)

// benchTimerKey is the TTL timer of state key i.
func benchTimerKey(i int) []byte {
	return store.TimerKey(fmt.Appendf(nil, "key-%09d", i), "\x00ttl")
}

// benchDue spreads the due times of n timers over [0, n) ms, in another
// order than their keys.
func benchDue(i, n int) int64 { return int64((uint64(i) * 7919) % uint64(n)) }

// buildTimers fills a new timer store with n TTL timers through
// ApplyRestored, as a restore does, 10,000 per batch.
func buildTimers(b *testing.B, n int) *store.Store {
	b.Helper()
	st := openTimers(b, b.TempDir())
	start := time.Now()
	ws := make([]store.Write, 0, 10_000)
	for i := 0; i < n; i++ {
		ws = append(ws, store.Write{Key: benchTimerKey(i), Value: store.TimerValue(eventTime, benchDue(i, n))})
		if len(ws) == cap(ws) || i == n-1 {
			require.NoError(b, st.ApplyRestored(ws, store.Checkpoint{Next: int64(i + 1)}))
			ws = ws[:0]
		}
	}
	b.Logf("built %d timers in %v", n, time.Since(start).Round(time.Millisecond))
	return st
}

// sweep fires (cancels) every timer due at or before upTo, k per
// ApplyThrough, as a TTL sweep does, and returns how many it cancelled.
func sweep(b *testing.B, st *store.Store, upTo int64, next *int64) int {
	b.Helper()
	var ws []store.Write
	n := 0
	for {
		ws = ws[:0]
		require.NoError(b, st.Due(eventTime, upTo, func(key []byte, name string, _ int64) (bool, error) {
			ws = append(ws, store.Write{Key: store.TimerKey(key, name), Delete: true})
			return len(ws) < 1000, nil
		}))
		if len(ws) == 0 {
			return n
		}
		*next++
		require.NoError(b, st.ApplyThrough(ws, *next))
		n += len(ws)
	}
}

// BenchmarkDueSweep measures the TTL sweep's index walk over a timer store
// of N timers: Due listing the k timers due (k = 0: the per-batch check
// that finds nothing due), right after the build and after 10% of the
// timers were fired and cancelled (their index tombstones lie before the
// live entries until compaction). ns/op is per walk; ns/due per timer
// listed. Compare N = 1M and 10M: the cost is a seek plus O(k).
func BenchmarkDueSweep(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		if testing.Short() && n > 1_000_000 {
			continue
		}
		b.Run(fmt.Sprintf("N=%dM", n/1_000_000), func(b *testing.B) {
			st := buildTimers(b, n)
			defer st.Close()
			walk := func(b *testing.B, from int64, k int) {
				for b.Loop() {
					got := 0
					require.NoError(b, st.Due(eventTime, from+int64(k)-1, func([]byte, string, int64) (bool, error) {
						got++
						return true, nil
					}))
					if got != k {
						b.Fatalf("listed %d timers, want %d", got, k)
					}
				}
				if k > 0 {
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(k), "ns/due")
				}
			}
			for _, k := range []int{0, 1, 100, 10_000} {
				b.Run(fmt.Sprintf("fresh/k=%d", k), func(b *testing.B) { walk(b, 0, k) })
			}
			var next int64 = int64(n)
			swept := int64(n / 10)
			start := time.Now()
			cancelled := sweep(b, st, swept-1, &next)
			require.Equal(b, int(swept), cancelled)
			b.Logf("swept %d timers in %v", cancelled, time.Since(start).Round(time.Millisecond))
			for _, k := range []int{0, 1, 100, 10_000} {
				b.Run(fmt.Sprintf("after-sweep/k=%d", k), func(b *testing.B) { walk(b, swept, k) })
			}
			b.Run("full-scan-for-reference", func(b *testing.B) {
				if n > 1_000_000 {
					b.Skip("O(N): shown at 1M only")
				}
				for b.Loop() {
					require.NoError(b, st.Due(eventTime, math.MaxInt64, func([]byte, string, int64) (bool, error) { return true, nil }))
				}
			})
		})
	}
}

// BenchmarkTimerCommit measures what a task's commit costs a timer store
// when every key re-arms its timers: per op, one ApplyThrough that moves
// the two timers (a user timer and a TTL timer) of each of 5,000 keys,
// of a store of 10,000 keys, later, as BenchmarkTimersThroughput (runner)
// does with each commit. It reports ns per moved timer.
func BenchmarkTimerCommit(b *testing.B) {
	const keys, perCommit = 10_000, 5_000
	st := openTimers(b, b.TempDir())
	defer st.Close()
	tk := make([][2][]byte, keys)
	for i := range keys {
		k := fmt.Appendf(nil, "key-%d", i)
		tk[i] = [2][]byte{store.TimerKey(k, "t"), store.TimerKey(k, "\x00ttl")}
	}
	ws := make([]store.Write, 0, 2*perCommit)
	next := int64(0)
	b.ResetTimer()
	for n := range b.N {
		ws = ws[:0]
		for j := range perCommit {
			i := (n*perCommit + j*7919) % keys
			due := int64(n*perCommit + j + 3_600_000)
			ws = append(ws, store.Write{Key: tk[i][0], Value: store.TimerValue(eventTime, due)},
				store.Write{Key: tk[i][1], Value: store.TimerValue(eventTime, due)})
		}
		next += int64(len(ws))
		if err := st.ApplyThrough(ws, next); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*perCommit), "ns/timer")
}
