package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/metrics"
)

var metricName = regexp.MustCompile(`flechtwerk_[a-z_]+[a-z]`)

// TestDocsUseCatalog checks that every metric name the operations guide
// (its alert rules included) and the Grafana dashboard use is in the
// catalog, and that the guide explains every metric of the catalog.
func TestDocsUseCatalog(t *testing.T) {
	guide, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	dash, err := os.ReadFile("../docs/grafana-dashboard.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(dash, &d), "the dashboard is JSON")
	exprs := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs++
			require.Regexp(t, metricName, tg.Expr, "every dashboard query reads a metric")
		}
	}
	require.NotZero(t, exprs)

	for file, text := range map[string][]byte{"operations.md": guide, "grafana-dashboard.json": dash} {
		names := metricName.FindAllString(string(text), -1)
		require.NotEmpty(t, names, file)
		for _, n := range names {
			_, ok := metrics.Lookup(n)
			require.True(t, ok, "%s uses %s, which is not in the catalog", file, n)
		}
	}
	for _, m := range metrics.Catalog() {
		require.True(t, strings.Contains(string(guide), m.Name), "operations.md explains %s", m.Name)
		require.True(t, strings.Contains(string(dash), m.Name), "the dashboard shows %s", m.Name)
	}
}
