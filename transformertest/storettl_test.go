package transformertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// TestStoreTTLKeptAliveByAnotherKey: a store key that another state key
// keeps writing never expires, whatever the order of the buckets of the
// batch in which its old expiry is due.
func TestStoreTTLKeptAliveByAnotherKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		// second is batch 2's input after a's record at t0+61m.
		second []transformertest.Input
	}{
		{"timer-only bucket after the writer", nil},
		{"own records after the writer", []transformertest.Input{at("in", "k", "x", t0.Add(62*time.Minute))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names := transformer.NewStore("names", transformer.String(), transformer.StoreTTL(time.Hour, transformer.EventTime))
			d, err := transformertest.New(transformer.New(func(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
				out.SetState(n + 1)
				if string(rec.Key) == "k" {
					return nil // k's own records do not write names
				}
				return names.Put(out, []byte("k"), string(rec.Value))
			}, transformer.Stores(names)), transformertest.Concurrency(1))
			require.NoError(t, err)
			ctx := context.Background()

			_, err = d.Process(ctx, at("in", "a", "v1", t0))
			require.NoError(t, err)
			due, ok := d.Expiry(0, "names", []byte("k"))
			require.True(t, ok)
			requireExpiry(t, t0, time.Hour, due)

			b, err := d.Process(ctx, append([]transformertest.Input{at("in", "a", "v2", t0.Add(61*time.Minute))}, tc.second...)...)
			require.NoError(t, err)
			require.Empty(t, b.Expired, "an expiry that loses to a write expires nothing")
			st, err := transformertest.StoreState(d, 0, names)
			require.NoError(t, err)
			require.Equal(t, map[string]string{"k": "v2"}, st)
			due, ok = d.Expiry(0, "names", []byte("k"))
			require.True(t, ok, "the write's re-arm survives")
			requireExpiry(t, t0.Add(61*time.Minute), time.Hour, due)

			// Unwritten for an hour after that, k expires at its due
			// time, not before.
			b, err = d.AdvanceStreamTime(ctx, due.Add(-time.Millisecond))
			require.NoError(t, err)
			require.Empty(t, b.Expired)
			b, err = d.AdvanceStreamTime(ctx, due)
			require.NoError(t, err)
			require.Equal(t, []transformertest.Expired{{Partition: 0, Store: "names", Key: []byte("k")}}, b.Expired)
			st, err = transformertest.StoreState(d, 0, names)
			require.NoError(t, err)
			require.Empty(t, st)
		})
	}
}

// requireExpiry: due is when a key last written at last expires under a
// TTL of d: d later, rounded up by at most d/64 (StateTTL, StoreTTL).
func requireExpiry(t *testing.T, last time.Time, d time.Duration, due time.Time) {
	t.Helper()
	require.False(t, due.Before(last.Add(d)), "expiry %v before %v + %v", due, last, d)
	require.False(t, due.After(last.Add(d+d/64)), "expiry %v after %v + %v + %v", due, last, d, d/64)
}
