package metrics_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/metrics"
)

type status struct {
	ready    error
	degraded []string
}

func (status) Healthy() error       { return nil }
func (s status) Ready() error       { return s.ready }
func (s status) Degraded() []string { return s.degraded }

// TestReadyzDegraded: a ready instance that isolated something stays 200
// and lists it; an unready one is 503 with its reason.
func TestReadyzDegraded(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    status
		code int
		body string
	}{
		{"ready", status{}, http.StatusOK, "ok\n"},
		{"degraded", status{degraded: []string{`config "a" quarantined`}}, http.StatusOK, "ok\nconfig \"a\" quarantined\n"},
		{"unready", status{ready: errors.New("runner: not ready: stopped"), degraded: []string{"x"}}, http.StatusServiceUnavailable, "runner: not ready: stopped\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			metrics.Handler(tc.s, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			require.Equal(t, tc.code, rec.Code)
			b, err := io.ReadAll(rec.Body)
			require.NoError(t, err)
			require.Equal(t, tc.body, string(b))
		})
	}
}
