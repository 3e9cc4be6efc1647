package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is what the probes ask; *runner.Runner implements it.
type Status interface {
	// Healthy reports nil while Run is alive (starting, restoring,
	// running, rebalancing, stopping), else why not.
	Healthy() error
	// Ready reports nil while every task of the instance is restored and
	// fetching, else why not.
	Ready() error
}

// Handler serves the probes and the metrics:
//
//   - /healthz: 200 "ok" while s is healthy, else 503 with the reason
//     (for a liveness probe: it fails once Run ended, with Run's error);
//   - /readyz: 200 "ok" while s is ready, else 503 with the reason (for a
//     readiness probe; restores and rebalances make it fail);
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
