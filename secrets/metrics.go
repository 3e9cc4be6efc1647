package secrets

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the metrics a codec records (WithMetrics). They are stable.
const (
	// MetricSeals counts values sealed (op seal) and signed (op sign).
	MetricSeals = "flechtwerk_secret_seals_total"
	// MetricOpens counts tokens opened (op open) and verified (op verify).
	MetricOpens = "flechtwerk_secret_opens_total"
	// MetricFailures counts failed seals, opens, signs and verifies by
	// reason: the error code in lower case without its prefix
	// (unknown_kid, authentication_failed, scope_refused,
	// algorithm_not_allowed, malformed, too_large, no_private_key,
	// plaintext_refused, unsigned_refused, keyring_invalid).
	MetricFailures = "flechtwerk_secret_failures_total"
	// MetricLegacyReads counts values read through a migration knob:
	// plaintext under ReadPlaintext (op open), unsigned under
	// ReadUnsigned (op verify).
	MetricLegacyReads = "flechtwerk_secret_legacy_reads_total"
)

// Metrics are the Prometheus counters of the secrets codecs. A nil
// *Metrics records nothing. Safe for concurrent use; one *Metrics may
// serve many codecs.
type Metrics struct {
	seal, sign, open, verify prometheus.Counter
	failures                 *prometheus.CounterVec
	legacyReads              *prometheus.CounterVec
}

// NewMetrics registers the counters on reg (wrap it with
// prometheus.WrapRegistererWith to add an application_id label, as the
// runner's metrics carry). reg nil returns nil: no metrics.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, nil
	}
	seals := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSeals,
		Help: "Values sealed (op seal) or signed (op sign) by a secrets codec."}, []string{"op"})
	opens := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricOpens,
		Help: "Tokens opened (op open) or verified (op verify) by a secrets codec."}, []string{"op"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricFailures,
		Help: "Failed seal, open, sign and verify calls of a secrets codec by reason (the error code)."}, []string{"op", "reason"})
	legacy := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLegacyReads,
		Help: "Values read as legacy plaintext (op open) or unsigned (op verify) through a migration knob."}, []string{"op"})
	for _, c := range []prometheus.Collector{seals, opens, failures, legacy} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return &Metrics{
		seal: seals.WithLabelValues("seal"), sign: seals.WithLabelValues("sign"),
		open: opens.WithLabelValues("open"), verify: opens.WithLabelValues("verify"),
		failures: failures, legacyReads: legacy,
	}, nil
}

// Reason returns the failure reason label of code.
func Reason(code Code) string {
	r := strings.ToLower(string(code))
	r = strings.TrimPrefix(r, "secret_")
	if r == "" {
		return "other"
	}
	return r
}

func (m *Metrics) sealed() {
	if m != nil {
		m.seal.Inc()
	}
}

func (m *Metrics) signed() {
	if m != nil {
		m.sign.Inc()
	}
}

func (m *Metrics) opened() {
	if m != nil {
		m.open.Inc()
	}
}

func (m *Metrics) verified() {
	if m != nil {
		m.verify.Inc()
	}
}

func (m *Metrics) failed(op string, code Code) {
	if m != nil {
		m.failures.WithLabelValues(op, Reason(code)).Inc()
	}
}

func (m *Metrics) legacy(op string) {
	if m != nil {
		m.legacyReads.WithLabelValues(op).Inc()
	}
}
