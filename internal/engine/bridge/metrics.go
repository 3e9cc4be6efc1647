package bridge

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The reasons a message is dropped (acknowledged without a record).
const (
	// DropPoison: the relay returned an error (or panicked).
	DropPoison = "poison"
	// DropFiltered: the relay returned no record.
	DropFiltered = "filtered"
	// DropStale: after the first reconciliation, no active config
	// declares a filter matching the message's topic.
	DropStale = "stale"
)

// Unmatched is the filter label of messages that match no active filter.
const Unmatched = "(unmatched)"

// metrics are the bridge's collectors, registered with the constant label
// application_id on the runner's registerer (none: unregistered).
type metrics struct {
	received  *prometheus.CounterVec
	forwarded *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	pending   prometheus.Gauge
	connected prometheus.Gauge
	session   prometheus.Gauge
	filters   prometheus.Gauge
	commits   prometheus.Counter
	commitDur prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, app string) (*metrics, error) {
	cl := prometheus.Labels{"application_id": app}
	m := &metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flechtwerk_mqtt_received_total", ConstLabels: cl,
			Help: "MQTT messages received, by the config filter they matched ((unmatched): none)."}, []string{"filter"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flechtwerk_mqtt_forwarded_total", ConstLabels: cl,
			Help: "MQTT messages whose record committed to Kafka and which were then acknowledged."}, []string{"filter"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flechtwerk_mqtt_dropped_total", ConstLabels: cl,
			Help: "MQTT messages acknowledged without a record, by reason (poison, filtered, stale)."}, []string{"filter", "reason"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flechtwerk_mqtt_pending_acks", ConstLabels: cl,
			Help: "MQTT messages received and not yet acknowledged (queued, held, or in an open transaction)."}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flechtwerk_mqtt_connected", ConstLabels: cl,
			Help: "1 while the MQTT connection is up, else 0."}),
		session: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flechtwerk_mqtt_session_present", ConstLabels: cl,
			Help: "1 when the broker resumed an existing session at connect, else 0."}),
		filters: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flechtwerk_mqtt_subscriptions", ConstLabels: cl,
			Help: "Topic filters subscribed (active configs)."}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "flechtwerk_mqtt_commits_total", ConstLabels: cl,
			Help: "Kafka transactions committed by the bridge."}),
		commitDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flechtwerk_mqtt_commit_seconds", ConstLabels: cl,
			Help: "Duration of the bridge's Kafka commits.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.received, m.forwarded, m.dropped, m.pending, m.connected, m.session, m.filters, m.commits, m.commitDur} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	return m, errors.Join(errs...)
}
