package extractor_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/metrics"
	"github.com/flechtwerk/flechtwerk/runner"
)

// TestMetricsOutputTopic: an extractor's committed pages count their
// records under the output topic they were sent to, and the extractor is
// ready while it runs.
func TestMetricsOutputTopic(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 12))

	reg := prometheus.NewRegistry()
	r, run := startRunner(t, c, pager(out, 5, 100, nil), runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour), runner.Metrics(reg))
	kafkatest.WaitFor(t, 60*time.Second, "all 12 items visible", func() bool {
		require.False(t, run.ended(), "extractor ended: %v", run.err)
		return countVisible(t, c, out) >= 12
	})
	require.NoError(t, r.Ready())

	byTopic := func() (map[string]float64, float64) {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		outs, pages := map[string]float64{}, 0.0
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case metrics.RecordsOut:
					for _, l := range m.GetLabel() {
						if l.GetName() == "topic" {
							outs[l.GetValue()] += m.GetCounter().GetValue()
						}
					}
				case metrics.ExtractorPages:
					pages += m.GetCounter().GetValue()
				}
			}
		}
		return outs, pages
	}
	outs, pages := byTopic()
	require.Equal(t, map[string]float64{out: 12}, outs)
	require.Equal(t, 3.0, pages, "pages of 5, 5 and 2 items")
	require.NoError(t, run.stop(t))
}
