package metrics_test

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/metrics"
)

// TestAlertRules: docs/alerts.yml holds exactly the rules of the guide's
// "Alert rules" block; the restore time histogram of the runner has the
// threshold of FlechtwerkRestoreTime as a bucket bound and buckets up to
// 30 minutes (a histogram whose buckets end below the threshold can never
// put a quantile above it), and the bucket bounds the rule tests use are
// its own; with promtool installed, the rules check and their unit tests
// (docs/alerts_test.yml) pass.
// runbookBase is the page the rules' runbook_url annotations link to.
const runbookBase = "https://github.com/flechtwerk/flechtwerk/blob/main/docs/operations.md"

func TestAlertRules(t *testing.T) {
	guide, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	rules, err := os.ReadFile("../docs/alerts.yml")
	require.NoError(t, err)
	tests, err := os.ReadFile("../docs/alerts_test.yml")
	require.NoError(t, err)

	t.Run("the rule file is the guide's block", func(t *testing.T) {
		g := string(guide)
		i := strings.Index(g, "```yaml\ngroups:\n")
		require.NotEqual(t, -1, i, "the guide has the rules block")
		block := g[i+len("```yaml\n"):]
		block = block[:strings.Index(block, "```\n")]
		r := string(rules)
		require.Equal(t, block, r[strings.Index(r, "groups:\n"):])
	})

	t.Run("restore buckets reach past the threshold", func(t *testing.T) {
		m := regexp.MustCompile(`(?s)alert: FlechtwerkRestoreTime\n\s+expr: [^\n]*flechtwerk_restore_duration_seconds_bucket[^\n]*\) > (\d+)\n`).FindStringSubmatch(string(rules))
		require.NotNil(t, m, "FlechtwerkRestoreTime compares a quantile of the restore time with a threshold")
		threshold, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)

		reg := prometheus.NewRegistry()
		rec, err := imetrics.New(reg, "app")
		require.NoError(t, err)
		rec.Restored(0, 400*time.Second)
		mfs, err := reg.Gather()
		require.NoError(t, err)
		bounds := map[float64]uint64{}
		var top float64
		for _, mf := range mfs {
			if mf.GetName() != metrics.RestoreDuration {
				continue
			}
			for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
				bounds[b.GetUpperBound()] = b.GetCumulativeCount()
				top = max(top, b.GetUpperBound())
			}
		}
		require.Contains(t, bounds, threshold, "the threshold %v s is a bucket bound", threshold)
		require.GreaterOrEqual(t, top, 1800.0, "the buckets reach 30 minutes")
		require.Zero(t, bounds[threshold], "a 400 s restore is above the threshold's bucket")
		require.EqualValues(t, 1, bounds[top], "a 400 s restore is in a finite bucket")

		les := regexp.MustCompile(`flechtwerk_restore_duration_seconds_bucket\{[^}]*le="([^"]+)"`).FindAllStringSubmatch(string(tests), -1)
		require.NotEmpty(t, les)
		for _, le := range les {
			if le[1] == "+Inf" {
				continue
			}
			v, err := strconv.ParseFloat(le[1], 64)
			require.NoError(t, err)
			require.Contains(t, bounds, v, "docs/alerts_test.yml uses le=%q, a bucket bound of the runner's histogram", le[1])
		}
	})

	t.Run("every rule has a severity, a summary and a runbook", func(t *testing.T) {
		blocks := strings.Split(string(rules), "  - alert: ")[1:]
		require.NotEmpty(t, blocks)
		for _, b := range blocks {
			name := b[:strings.Index(b, "\n")]
			require.Regexp(t, `\n    labels:\n      severity: (critical|warning)\n`, b, "%s has a severity", name)
			require.Regexp(t, `\n      summary: "[^"]+"\n`, b, "%s has a summary", name)
			anchor := strings.ToLower(name)
			require.Contains(t, b, "\n      runbook_url: "+runbookBase+"#"+anchor+"\n", "%s links its runbook", name)
			require.Contains(t, string(guide), "\n### "+name+"\n", "operations.md has the runbook of %s (anchor #%s)", name, anchor)
		}
	})

	t.Run("every rule is tested firing and silent", func(t *testing.T) {
		names := regexp.MustCompile(`(?m)^  - alert: (\w+)$`).FindAllStringSubmatch(string(rules), -1)
		evals := regexp.MustCompile(`(?m)^      - eval_time: \w+\n        alertname: (\w+)\n(        exp_alerts:)?`).FindAllStringSubmatch(string(tests), -1)
		fires, silent := map[string]bool{}, map[string]bool{}
		for _, e := range evals {
			if e[2] != "" {
				fires[e[1]] = true
			} else {
				silent[e[1]] = true
			}
		}
		for _, n := range names {
			require.True(t, fires[n[1]], "docs/alerts_test.yml has a case where %s fires", n[1])
			require.True(t, silent[n[1]], "docs/alerts_test.yml has a case where %s stays silent", n[1])
		}
	})

	t.Run("promtool", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			if os.Getenv("FLECHTWERK_REQUIRE_PROMTOOL") != "" {
				t.Fatal("promtool is required (FLECHTWERK_REQUIRE_PROMTOOL) but not installed (Debian: apt-get install prometheus)")
			}
			t.Skip("promtool is not installed (Debian: apt-get install prometheus); make test runs it (scripts/promtool.sh)")
		}
		for _, args := range [][]string{{"check", "rules", "../docs/alerts.yml"}, {"test", "rules", "../docs/alerts_test.yml"}} {
			out, err := exec.Command(promtool, args...).CombinedOutput()
			require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		}
	})
}
