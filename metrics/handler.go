package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is what the probes ask; *runner.Runner implements it.
type Status interface {
	// Healthy reports nil while Run is alive (starting, restoring,
	// running, rebalancing, stopping) and its main loop comes round,
	// else why not.
	Healthy() error
	// Ready reports nil while the instance can serve its tasks (its
	// first assignment was restored, and Run is not stopping or ended),
	// else why not. Rebalances do not make it unready.
	Ready() error
}

// Degraded is a Status that can also say what a ready instance does not
// serve (an extractor's quarantined configs); *runner.Runner implements
// it.
type Degraded interface {
	// Degraded returns one line per thing not served; none when all is.
	Degraded() []string
}

// Handler serves the probes and the metrics:
//
//   - /healthz: 200 "ok" while s is healthy, else 503 with the reason
//     (for a liveness probe: it fails once Run ended, with Run's error,
//     or when the main loop stalled);
//   - /readyz: 200 "ok" while s is ready, else 503 with the reason (for a
//     readiness probe: it fails until the first assignment is restored
//     and once Run stops; rebalances and later restores do not); when s
//     is Degraded, a ready instance's "ok" is followed by its lines (the
//     status stays 200: what it isolated does not stop the rest);
//   - /metrics: g in the Prometheus exposition format (404 when g is nil).
func Handler(s Status, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	probe := func(check func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if err := check(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(err.Error() + "\n"))
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		}
	}
	mux.Handle("/healthz", probe(s.Healthy))
	ready := probe(s.Ready)
	if d, ok := s.(Degraded); ok {
		ready = func(w http.ResponseWriter, r *http.Request) {
			if s.Ready() != nil {
				probe(s.Ready)(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok\n"))
			for _, l := range d.Degraded() {
				_, _ = w.Write([]byte(l + "\n"))
			}
		}
	}
	mux.Handle("/readyz", ready)
	if g != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	return mux
}
