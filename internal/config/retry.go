package config

import (
	"time"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/retry"
)

// RetryOptions are the retry policies of sink writes (SinkRetry) and
// extractor polls (PollRetry), nil when not given (let it crash), and the
// quarantine of an extractor's failing configs.
type RetryOptions struct {
	Sink, Poll *retry.Policy
	// Quarantine isolates a config whose poll failed instead of ending
	// Run; QuarantineFor is how long it stays isolated unless its config
	// record changes first (0: until it changes).
	Quarantine    bool
	QuarantineFor time.Duration
}

// validate reports every problem of the retry options.
func (r *RetryOptions) validate() []error {
	var errs []error
	for _, p := range []struct {
		name string
		p    *retry.Policy
	}{{"SinkRetry", r.Sink}, {"PollRetry", r.Poll}} {
		if p.p == nil {
			continue
		}
		bad := func(format string, args ...any) {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, p.name, format, args...))
		}
		switch {
		case p.p.Transient == nil:
			bad("no Transient classifier: without one no error is retried")
		case p.p.MaxAttempts < 0:
			bad("MaxAttempts must be 0 (no bound) or positive, is %d", p.p.MaxAttempts)
		case p.p.MaxElapsed < 0:
			bad("MaxElapsed must be 0 (no bound) or positive, is %v", p.p.MaxElapsed)
		case p.p.MaxAttempts == 0 && p.p.MaxElapsed == 0:
			bad("neither MaxAttempts nor MaxElapsed bounds the retries")
		case p.p.Initial <= 0 || p.p.Max < p.p.Initial:
			bad("backoff from %v up to %v: the first wait must be positive and not exceed the longest", p.p.Initial, p.p.Max)
		}
	}
	if r.QuarantineFor < 0 {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "QuarantineFailingConfigs", "must be 0 (until the config changes) or positive, is %v", r.QuarantineFor))
	}
	return errs
}
