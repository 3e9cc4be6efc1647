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

// Handler serves the probes and the metrics:
//
//   - /healthz: 200 "ok" while s is healthy, else 503 with the reason
//     (for a liveness probe: it fails once Run ended, with Run's error,
//     or when the main loop stalled);
//   - /readyz: 200 "ok" while s is ready, else 503 with the reason (for a
//     readiness probe: it fails until the first assignment is restored
//     and once Run stops; rebalances and later restores do not);
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
	mux.Handle("/readyz", probe(s.Ready))
	if g != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	return mux
}
