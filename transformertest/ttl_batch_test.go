package transformertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// TestStateTTLIdleGapWithinOneBatch: k's expiry hint (t0+1h, its first
// write) fires in a batch before k's first record there and moves on
// (k was written at 50m). Later in the same batch stream time passes
// more than the TTL after that record before k's next record: k was
// idle for more than d and must expire before it (OnExpire, count
// restarting), as it did when the expiry was exact.
func TestStateTTLIdleGapWithinOneBatch(t *testing.T) {
	counter := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		e.Send("counts", rec.Key, fmt.Appendf(nil, "%d", n+1))
		return nil
	}, transformer.StateTTL(time.Hour, transformer.EventTime),
		transformer.OnExpire(func(_ context.Context, key []byte, n int, o *transformer.Outputs) error {
			o.Send("expired", key, fmt.Appendf(nil, "%d", n))
			return nil
		}))
	d, err := transformertest.New(counter)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = d.Process(ctx, at("in", "k", "", t0))
	require.NoError(t, err)
	_, err = d.Process(ctx, at("in", "k", "", t0.Add(50*time.Minute)))
	require.NoError(t, err)
	b, err := d.Process(ctx,
		at("in", "other", "", t0.Add(61*time.Minute)),
		at("in", "k", "", t0.Add(62*time.Minute)),  // count 3, last write
		at("in", "other", "", t0.Add(3*time.Hour)), // k idle for 1h58m
		at("in", "k", "", t0.Add(3*time.Hour+time.Minute)),
	)
	require.NoError(t, err)
	var got []string
	for _, o := range b.Outputs {
		got = append(got, o.Topic+":"+string(o.Key)+"="+string(o.Value))
	}
	require.Contains(t, got, "expired:k=3", "outputs %q", got)
	require.Contains(t, got, "counts:k=1", "outputs %q", got)
}
