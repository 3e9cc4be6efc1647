package metrics_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/metrics"
	pub "github.com/flechtwerk/flechtwerk/metrics"
)

func newRecorder(t *testing.T) (*metrics.Recorder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg, "app")
	require.NoError(t, err)
	return rec, reg
}

// TestBuildInfo: one series, value 1, with the Go version of the binary
// and a version and revision that are never empty.
func TestBuildInfo(t *testing.T) {
	_, reg := newRecorder(t)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != pub.BuildInfo {
			continue
		}
		require.Len(t, mf.GetMetric(), 1)
		m := mf.GetMetric()[0]
		require.Equal(t, 1.0, m.GetGauge().GetValue())
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		require.Equal(t, runtime.Version(), labels["go_version"])
		require.Equal(t, "app", labels["application_id"])
		require.NotEmpty(t, labels["version"])
		require.NotEmpty(t, labels["revision"])
		return
	}
	t.Fatalf("%s is not registered", pub.BuildInfo)
}

// TestOutputsByTopic: a transformer's commit and an extractor's page count
// their output records (and a commit its bytes) per output topic.
func TestOutputsByTopic(t *testing.T) {
	rec, reg := newRecorder(t)
	res := &batch.Result{Outputs: []*kgo.Record{{Topic: "out", Value: []byte("abc")}}}
	rec.Committed(3, fakeInterval{nil, res}, time.Millisecond)
	rec.Page(5, []*kgo.Record{{Topic: "a"}, {Topic: "a"}, {Topic: "b"}, {Topic: "a"}})

	require.Equal(t, map[string]float64{"out/3": 1, "a/5": 3, "b/5": 1}, byTopic(t, reg, pub.RecordsOut))
	require.Equal(t, map[string]float64{"out/3": 3}, byTopic(t, reg, pub.OutputBytes))
}

// TestTransformPerChunk: the transform time of a chunk is observed once,
// whole, whatever its number of records.
func TestTransformPerChunk(t *testing.T) {
	rec, reg := newRecorder(t)
	began := time.Now().Add(-2 * time.Second)
	rec.Chunk(100, began, began.Add(time.Second))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == pub.BatchTransformDuration {
			h := mf.GetMetric()[0].GetHistogram()
			require.EqualValues(t, 1, h.GetSampleCount())
			require.InDelta(t, 1.0, h.GetSampleSum(), 1e-9)
			return
		}
	}
	t.Fatalf("%s is not registered", pub.BatchTransformDuration)
}

// byTopic returns the values of the counter name by "topic/partition".
func byTopic(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out[l["topic"]+"/"+l["partition"]] = m.GetCounter().GetValue()
		}
	}
	return out
}
