package runner

import (
	"fmt"
	"time"

	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/retry"
	"github.com/flechtwerk/flechtwerk/metrics"
)

// RetryPolicy retries an operation outside Kafka (a sink's Write, an
// extractor's poll) after errors the user classifies as transient, with
// exponential backoff and jitter, within bounded attempts and total time
// (Kafka Connect's errors.retry.timeout). Without a policy every such
// error ends Run (let it crash), which stays the default.
type RetryPolicy struct {
	// Transient reports whether err may succeed when tried again (a
	// timeout, a 503, a lost connection). Required: an error it rejects
	// ends Run at once, as without a policy. It is called from several
	// goroutines at once.
	Transient func(err error) bool
	// MaxAttempts bounds the attempts, the first one included; 0 means
	// no bound (MaxElapsed then bounds them).
	MaxAttempts int
	// MaxElapsed bounds the total time: no attempt starts later than
	// MaxElapsed after the first one began. 0 means no bound
	// (MaxAttempts then bounds them). At least one of the two is set.
	MaxElapsed time.Duration
	// InitialInterval is the first wait (default 100ms); each further
	// wait is 1.5 times the previous one, up to MaxInterval (default
	// 10s), each randomized by ±50% (jitter).
	InitialInterval time.Duration
	MaxInterval     time.Duration
}

func (p RetryPolicy) policy() *retry.Policy {
	init, maxI := p.InitialInterval, p.MaxInterval
	if init == 0 {
		init = 100 * time.Millisecond
	}
	if maxI == 0 {
		maxI = max(10*time.Second, init)
	}
	return &retry.Policy{
		MaxAttempts: p.MaxAttempts,
		MaxElapsed:  p.MaxElapsed,
		Initial:     init,
		Max:         maxI,
		Multiplier:  1.5,
		Jitter:      0.5,
		Transient:   p.Transient,
	}
}

// SinkRetry retries a sink's Write of one partition's batch under p. The
// batch is written again whole (Write must be idempotent under
// at-least-once anyway); its offsets commit only once a Write returned
// nil, so at-least-once holds. While a batch is retried, the poll cycle
// waits for it and rebalances wait for the cycle: keep MaxElapsed below
// the group's rebalance timeout (60s by default). An error p does not
// classify as transient, or the last one when the attempts or the time
// are used up, ends Run with its *sink.WriteError, as without the option.
// Each retry is logged at warn and counted (flechtwerk_sink_retries_total).
// Invalid policies are flechtwerk.CodeInvalidOption errors of NewSink.
// At-least-once only: an at-most-once sink with it is a
// flechtwerk.CodeDeliveryConflict error (a retried write of unknown
// outcome could store its records twice).
func SinkRetry(p RetryPolicy) SinkOpt {
	return sOpt{setter: func(c *config.Options) { c.Retry.Sink = p.policy() }}
}

// PollRetry polls a config again under p when its poll failed with an
// *extractor.PollError whose cause p classifies as transient. The open
// page of the failed attempt was aborted (nothing of it is visible, the
// cursor did not move), so the next attempt starts from the last committed
// cursor: exactly-once holds. Errors of the token's transactions (a commit
// that failed, a fenced producer) are never retried here. Without
// QuarantineFailingConfigs, an error that is not transient, or the last
// one, ends Run as without the option. Each retry is logged at warn and
// counted (flechtwerk_extractor_poll_retries_total). Invalid policies are
// flechtwerk.CodeInvalidOption errors of NewExtractor.
func PollRetry(p RetryPolicy) ExtractorOpt {
	return xOpt{setter: func(c *config.Options) { c.Retry.Poll = p.policy() }}
}

// QuarantineFailingConfigs isolates a config whose poll failed with an
// *extractor.PollError (after PollRetry's attempts, if given) instead of
// ending Run for every config: the config is no longer polled, is logged
// at error, counted in flechtwerk_extractor_quarantined_configs and listed
// by Runner.Quarantined, while the other configs keep polling. Its cursor
// stays at its last committed page. It is polled again when its config
// record changes (a new value, or a re-put of the same one), or, when
// after is positive, once after has passed; a config whose token moves to
// another instance leaves the quarantine here (its new owner polls it).
// Errors of the token's transactions still end Run. Given a negative
// after, NewExtractor reports flechtwerk.CodeInvalidOption. Default: off
// (a failed poll ends Run).
func QuarantineFailingConfigs(after time.Duration) ExtractorOpt {
	return xOpt{setter: func(c *config.Options) {
		c.Retry.Quarantine, c.Retry.QuarantineFor = true, after
	}}
}

// QuarantinedConfig is a config an extractor isolated after its poll
// failed (QuarantineFailingConfigs).
type QuarantinedConfig struct {
	Key []byte
	// Err is the poll's last error (an *extractor.PollError).
	Err   error
	Since time.Time
	// Until is when it is polled again unless its config record changes
	// first; zero: only once it changes.
	Until time.Time
}

// Quarantined returns the configs this instance of an extractor holds in
// quarantine, by key; nil for other stages or when Run is not running.
// A quarantined config does not make the instance unhealthy or unready
// (its neighbours are served): alert on
// flechtwerk_extractor_quarantined_configs. Safe for concurrent use.
func (r *Runner) Quarantined() []QuarantinedConfig {
	if r.ex == nil {
		return nil
	}
	var out []QuarantinedConfig
	for _, q := range r.ex.Quarantined() {
		out = append(out, QuarantinedConfig{Key: q.Key, Err: q.Err, Since: q.Since, Until: q.Until})
	}
	return out
}

var _ metrics.Degraded = (*Runner)(nil)

// Degraded returns one line per quarantined config of an extractor, for
// the body of /readyz (metrics.Degraded): the instance stays ready.
func (r *Runner) Degraded() []string {
	var out []string
	for _, q := range r.Quarantined() {
		l := fmt.Sprintf("config %q quarantined since %s", q.Key, q.Since.UTC().Format(time.RFC3339))
		if !q.Until.IsZero() {
			l += " until " + q.Until.UTC().Format(time.RFC3339)
		}
		out = append(out, l+": "+q.Err.Error())
	}
	return out
}
