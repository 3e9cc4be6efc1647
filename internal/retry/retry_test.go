package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/retry"
)

var errAgain = errors.New("again")

func again(err error) bool { return errors.Is(err, errAgain) }

func TestDo(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		p       *retry.Policy
		errs    []error // what each call returns; nil afterwards
		want    error
		calls   int
		retried int
	}{
		{"disabled: one call", nil, []error{errAgain}, errAgain, 1, 0},
		{"no classifier: one call", &retry.Policy{MaxAttempts: 5, Initial: time.Millisecond, Max: time.Millisecond}, []error{errAgain}, errAgain, 1, 0},
		{"transient then success", &retry.Policy{MaxAttempts: 5, Initial: time.Millisecond, Max: time.Millisecond, Transient: again}, []error{errAgain, errAgain}, nil, 3, 2},
		{"permanent at once", &retry.Policy{MaxAttempts: 5, Initial: time.Millisecond, Max: time.Millisecond, Transient: again}, []error{boom}, boom, 1, 0},
		{"attempts used up", &retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Max: time.Millisecond, Transient: again}, []error{errAgain, errAgain, errAgain, errAgain}, errAgain, 3, 2},
		{"transient then permanent", &retry.Policy{MaxAttempts: 5, Initial: time.Millisecond, Max: time.Millisecond, Transient: again}, []error{errAgain, boom}, boom, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, retried := 0, 0
			err := tc.p.Do(context.Background(), func() error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			}, func(error, time.Duration) { retried++ })
			require.Equal(t, tc.want, err)
			require.Equal(t, tc.calls, calls)
			require.Equal(t, tc.retried, retried)
		})
	}
}

// TestDoElapsed: no wait is begun that would end after MaxElapsed: the
// waits announced sum to at most MaxElapsed, and with no attempt bound
// the elapsed time alone ends the retries.
func TestDoElapsed(t *testing.T) {
	const bound = 200 * time.Millisecond
	p := &retry.Policy{MaxElapsed: bound, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 1.5, Jitter: 0.5, Transient: again}
	calls := 0
	var waited time.Duration
	err := p.Do(context.Background(), func() error { calls++; return errAgain }, func(_ error, d time.Duration) { waited += d })
	require.ErrorIs(t, err, errAgain)
	require.Greater(t, calls, 2)
	require.LessOrEqual(t, waited, bound)
}

// TestDoContext: a canceled ctx ends the waits with its cause.
func TestDoContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := retry.Doubling(time.Hour, time.Hour, again)
	err := p.Do(ctx, func() error { cancel(); return errAgain }, nil)
	require.ErrorIs(t, err, context.Canceled)
}

// TestDoubling: waits double up to the longest, without jitter.
func TestDoubling(t *testing.T) {
	p := retry.Doubling(20*time.Millisecond, 100*time.Millisecond, again)
	p.MaxAttempts = 6
	var waits []time.Duration
	err := p.Do(context.Background(), func() error { return errAgain }, func(_ error, d time.Duration) { waits = append(waits, d) })
	require.ErrorIs(t, err, errAgain)
	ms := time.Millisecond
	require.Equal(t, []time.Duration{20 * ms, 40 * ms, 80 * ms, 100 * ms, 100 * ms}, waits)
}
