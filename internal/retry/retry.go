package retry

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Policy is when and how an operation is tried again. The zero Policy
// never retries.
type Policy struct {
	// MaxAttempts bounds the attempts, the first included; 0 means no
	// bound (MaxElapsed bounds them).
	MaxAttempts int
	// MaxElapsed bounds the total time: no attempt starts later than
	// MaxElapsed after the first began. 0 means no bound.
	MaxElapsed time.Duration
	// Initial is the first wait, Max the longest; each wait is the
	// previous times Multiplier, with jitter of ±Jitter of itself.
	Initial, Max time.Duration
	Multiplier   float64
	Jitter       float64
	// Transient reports whether err may be tried again; nil: no error
	// is.
	Transient func(error) bool
}

// Enabled reports whether p retries anything.
func (p *Policy) Enabled() bool { return p != nil && p.Transient != nil && p.MaxAttempts != 1 }

// Do calls op until it returns nil, returns an error Transient does not
// accept, the attempts or the time are used up, or ctx ends; retried is
// called before each wait with the error and the wait. It returns op's
// last error (ctx's cause when ctx ended during a wait). A disabled
// policy calls op once.
func (p *Policy) Do(ctx context.Context, op func() error, retried func(err error, wait time.Duration)) error {
	if !p.Enabled() {
		return op()
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = p.Initial, p.Max
	b.Multiplier, b.RandomizationFactor = p.Multiplier, p.Jitter
	opts := []backoff.RetryOption{backoff.WithBackOff(b), backoff.WithMaxElapsedTime(p.MaxElapsed)}
	if p.MaxAttempts > 0 {
		opts = append(opts, backoff.WithMaxTries(uint(p.MaxAttempts)))
	}
	if retried != nil {
		opts = append(opts, backoff.WithNotify(backoff.Notify(retried)))
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := op()
		if err != nil && !p.Transient(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, opts...)
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		return perm.Unwrap()
	}
	return err
}

// Doubling returns a Policy without jitter whose waits start at initial
// and double up to maxWait: for broker state that settles (a coordinator
// loading, a topic's metadata spreading), where the waits need not be
// spread. The caller sets its bounds.
func Doubling(initial, maxWait time.Duration, transient func(error) bool) *Policy {
	return &Policy{Initial: initial, Max: max(initial, maxWait), Multiplier: 2, Transient: transient}
}
