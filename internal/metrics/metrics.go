// Package metrics records the runner's Prometheus metrics (the catalog of
// the public metrics package). A nil *Recorder records nothing: every hook
// is a no-op on it, so the hot path pays one nil check when metrics are
// off.
//
// Hooks are safe for concurrent use. Values that cost I/O or a scan (lag,
// store entries and bytes, config entries, cursor age) are computed at
// scrape time from a Source the runner attaches while it runs.
package metrics

import (
	"context"
	"errors"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/fencing"
	pub "github.com/flechtwerk/flechtwerk/metrics"
	"github.com/flechtwerk/flechtwerk/store"
)

// Recorder holds the registered collectors of one runner.
type Recorder struct {
	recordsIn, inBytes                 *prometheus.CounterVec
	recordsOut, outBytes, stateWrites  *prometheus.CounterVec
	stateValue                         prometheus.Histogram
	invalid, deadLetters               *prometheus.CounterVec
	batchRecords, batchTime, transform prometheus.Histogram
	committed, aborted, fenced         *prometheus.CounterVec
	restarts                           *prometheus.CounterVec
	commitTime                         prometheus.Histogram
	rebalances                         prometheus.Counter
	rebalanceTime                      prometheus.Histogram
	tasks, runnerState                 *prometheus.GaugeVec
	restoreRecords                     *prometheus.CounterVec
	restoreRemaining, restoreProgress  *prometheus.GaugeVec
	restoreTime                        prometheus.Histogram
	polls, pollErrors, pages           *prometheus.CounterVec
	pollTime                           prometheus.Histogram
	lagDesc, entriesDesc, bytesDesc    *prometheus.Desc
	standbyLagDesc                     *prometheus.Desc
	configDesc, cursorAgeDesc          *prometheus.Desc
	pollRetries                        *prometheus.CounterVec
	quarantined                        prometheus.Gauge
	sinkWrites, sinkRecords            *prometheus.CounterVec
	sinkErrors, sinkRetries            *prometheus.CounterVec
	sinkWriteTime                      prometheus.Histogram
	sinkCommitted                      *prometheus.GaugeVec

	mu      sync.Mutex
	src     Source
	lag     map[TP]int64
	lagAt   time.Time
	sbLag   map[int32]int64
	entries map[int32]cachedCount
	cursors map[string]time.Time // config key -> end of its last successful poll
}

type cachedCount struct {
	n  int
	at time.Time
}

// TP is a topic partition.
type TP struct {
	Topic     string
	Partition int32
}

// Source gives the scrape-time values of a running Run. Any method may be
// left to return nothing.
type Source interface {
	// Lag returns the lag of every partition of the input topics.
	Lag(ctx context.Context) (map[TP]int64, error)
	// Stores calls fn for the store of every running task; the store
	// stays open during the call.
	Stores(fn func(partition int32, st *store.Store))
	// Configs returns the number of live configs and whether key is one
	// (an extractor; nil for a transformer).
	Configs() (n int, live func(key []byte) bool)
}

// StandbySource is a Source of a run with standby replicas.
type StandbySource interface {
	// StandbyLag returns, per standby task, the changelog offsets its
	// store is behind the last stable offset.
	StandbyLag(ctx context.Context) (map[int32]int64, error)
}

// restoreBuckets are the bounds of the restore time histogram, in
// seconds: a restore can take many minutes, and the alert on restore time
// (docs/alerts.yml, 300 s) needs buckets beyond its threshold, with the
// threshold a bound.
var restoreBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800}

// New registers the catalog on reg with the constant label
// application_id=app. reg nil returns a nil Recorder.
func New(reg prometheus.Registerer, app string) (*Recorder, error) {
	if reg == nil {
		return nil, nil
	}
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"application_id": app}, reg)
	r := &Recorder{entries: map[int32]cachedCount{}, cursors: map[string]time.Time{}}
	var errs []error
	byName := map[string]pub.Metric{}
	for _, m := range pub.Catalog() {
		byName[m.Name] = m
	}
	counter := func(name string) *prometheus.CounterVec {
		m := byName[name]
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: m.Help}, m.Labels)
		errs = append(errs, reg.Register(c))
		return c
	}
	gauge := func(name string) *prometheus.GaugeVec {
		m := byName[name]
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: m.Help}, m.Labels)
		errs = append(errs, reg.Register(g))
		return g
	}
	hist := func(name string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: byName[name].Help, Buckets: buckets})
		errs = append(errs, reg.Register(h))
		return h
	}
	desc := func(name string) *prometheus.Desc {
		m := byName[name]
		return prometheus.NewDesc(name, m.Help, m.Labels, nil) // application_id: by the wrapping registerer
	}
	secs := prometheus.ExponentialBuckets(0.0005, 2, 18) // 0.5ms .. ~65s
	r.runnerState = gauge(pub.RunnerState)
	r.recordsIn, r.inBytes = counter(pub.RecordsIn), counter(pub.InputBytes)
	r.recordsOut, r.outBytes, r.stateWrites = counter(pub.RecordsOut), counter(pub.OutputBytes), counter(pub.StateWrites)
	r.stateValue = hist(pub.StateValueBytes, prometheus.ExponentialBuckets(16, 4, 10)) // 16B .. 4MiB
	r.invalid, r.deadLetters = counter(pub.InvalidRecords), counter(pub.DeadLetters)
	r.batchRecords = hist(pub.BatchRecords, prometheus.ExponentialBuckets(1, 2, 14))
	r.batchTime = hist(pub.BatchDuration, secs)
	r.transform = hist(pub.BatchTransformDuration, secs)
	r.committed, r.aborted, r.fenced = counter(pub.TxnCommitted), counter(pub.TxnAborted), counter(pub.Fenced)
	r.restarts = counter(pub.TaskRestarts)
	r.commitTime = hist(pub.CommitDuration, secs)
	rb := prometheus.NewCounter(prometheus.CounterOpts{Name: pub.Rebalances, Help: byName[pub.Rebalances].Help})
	errs = append(errs, reg.Register(rb))
	r.rebalances = rb
	r.rebalanceTime = hist(pub.RebalanceDuration, secs)
	r.tasks = gauge(pub.Tasks)
	r.restoreRecords = counter(pub.RestoreRecords)
	r.restoreRemaining, r.restoreProgress = gauge(pub.RestoreRemaining), gauge(pub.RestoreProgress)
	r.restoreTime = hist(pub.RestoreDuration, restoreBuckets)
	r.polls, r.pollErrors, r.pages = counter(pub.ExtractorPolls), counter(pub.ExtractorPollErrors), counter(pub.ExtractorPages)
	r.pollTime = hist(pub.ExtractorPollTime, secs)
	r.pollRetries = counter(pub.ExtractorPollRetries)
	q := prometheus.NewGauge(prometheus.GaugeOpts{Name: pub.ExtractorQuarantined, Help: byName[pub.ExtractorQuarantined].Help})
	errs = append(errs, reg.Register(q))
	r.quarantined = q
	r.sinkWrites, r.sinkRecords = counter(pub.SinkWrites), counter(pub.SinkRecordsWritten)
	r.sinkErrors, r.sinkRetries = counter(pub.SinkWriteErrors), counter(pub.SinkRetries)
	r.sinkWriteTime = hist(pub.SinkWriteDuration, secs)
	r.sinkCommitted = gauge(pub.SinkCommittedOffset)
	bi := byName[pub.BuildInfo]
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: pub.BuildInfo, Help: bi.Help, ConstLabels: buildLabels()})
	build.Set(1)
	errs = append(errs, reg.Register(build))
	r.lagDesc, r.entriesDesc, r.bytesDesc = desc(pub.ConsumerLag), desc(pub.StoreEntries), desc(pub.StoreBytes)
	r.configDesc, r.cursorAgeDesc = desc(pub.ConfigEntries), desc(pub.ExtractorCursorAge)
	r.standbyLagDesc = desc(pub.StandbyLag)
	errs = append(errs, reg.Register(scrape{r}))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.tasks.WithLabelValues("standby").Set(0)
	return r, nil
}

func part(p int32) string { return strconv.FormatInt(int64(p), 10) }

// Interval is what the recorder reads of a task's commit (task.Stats).
type Interval interface {
	// Transactional reports a transaction; false is an offsets-only
	// commit through the group member.
	Transactional() bool
	Inputs(fn func(topic string, records int, bytes int64))
	Outputs(fn func(topic string, records int, bytes int64))
	StateWrites() int
	StateValues(fn func(n int))
}

// Committed records a commit of partition's task: the inputs, outputs and
// state writes of the records it committed; a transaction also counts as
// committed, with its commit latency d.
func (r *Recorder) Committed(partition int32, s Interval, d time.Duration) {
	if r == nil {
		return
	}
	p := part(partition)
	s.Inputs(func(topic string, n int, bytes int64) {
		r.recordsIn.WithLabelValues(topic, p).Add(float64(n))
		r.inBytes.WithLabelValues(topic, p).Add(float64(bytes))
	})
	if !s.Transactional() {
		return
	}
	r.committed.WithLabelValues(p).Inc()
	r.commitTime.Observe(d.Seconds())
	s.Outputs(func(topic string, n int, bytes int64) {
		r.recordsOut.WithLabelValues(topic, p).Add(float64(n))
		r.outBytes.WithLabelValues(topic, p).Add(float64(bytes))
	})
	if n := s.StateWrites(); n > 0 {
		r.stateWrites.WithLabelValues(p).Add(float64(n))
		s.StateValues(func(n int) { r.stateValue.Observe(float64(n)) })
	}
}

// CommitFailed records a transaction of partition's task whose commit
// failed after d (it was aborted, or the broker aborts it).
func (r *Recorder) CommitFailed(partition int32, d time.Duration, err error) {
	if r == nil {
		return
	}
	r.commitTime.Observe(d.Seconds())
	r.Aborted(partition, "commit", err)
}

// Aborted records that what partition's task processed since its last
// commit ended without one, for reason (transform, commit, timeout); an
// err of a fenced producer makes it fenced and counts the fence.
func (r *Recorder) Aborted(partition int32, reason string, err error) {
	if r == nil {
		return
	}
	p := part(partition)
	if errors.Is(err, fencing.ErrFenced) {
		reason = "fenced"
		r.fenced.WithLabelValues(p).Inc()
	}
	r.aborted.WithLabelValues(p, reason).Inc()
}

// TaskRestarted records that partition's task was closed dirty after a
// transient error and re-initialized without ending Run.
func (r *Recorder) TaskRestarted(partition int32) {
	if r == nil {
		return
	}
	r.restarts.WithLabelValues(part(partition)).Inc()
}

// module is the path of the library's module.
const module = "github.com/flechtwerk/flechtwerk"

// buildLabels are the labels of the build info gauge: the library's
// module version (as the binary records it; "(devel)" in its own
// repository), the Go version, and the VCS revision of the binary
// ("unknown" when it was not recorded).
func buildLabels() prometheus.Labels {
	l := prometheus.Labels{"version": "unknown", "go_version": runtime.Version(), "revision": "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return l
	}
	if bi.Main.Path == module {
		l["version"] = bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			l["version"] = d.Version
			if d.Replace != nil && d.Replace.Version != "" {
				l["version"] = d.Replace.Version
			}
		}
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			l["revision"] = s.Value
		}
	}
	if l["version"] == "" {
		l["version"] = "unknown"
	}
	return l
}

// Chunk records a chunk of records input records a task's worker took:
// processing began at began, the transform ended at transformed, and it
// joined the open transaction now.
func (r *Recorder) Chunk(records int, began, transformed time.Time) {
	if r == nil {
		return
	}
	r.batchRecords.Observe(float64(records))
	r.batchTime.Observe(time.Since(began).Seconds())
	r.transform.Observe(transformed.Sub(began).Seconds())
}

// InvalidRecords records n committed input records the invalid-record
// policy handled.
func (r *Recorder) InvalidRecords(policy string, n int) {
	if r != nil && n > 0 {
		r.invalid.WithLabelValues(policy).Add(float64(n))
	}
}

// DeadLetter records n records committed to the dead-letter topic.
func (r *Recorder) DeadLetter(topic string, n int) {
	if r != nil && n > 0 {
		r.deadLetters.WithLabelValues(topic).Add(float64(n))
	}
}

// State sets the runner state gauge: 1 for state, 0 for the others.
func (r *Recorder) State(state string, all []string) {
	if r == nil {
		return
	}
	for _, s := range all {
		v := 0.0
		if s == state {
			v = 1
		}
		r.runnerState.WithLabelValues(s).Set(v)
	}
}

// Tasks sets the task gauges.
func (r *Recorder) Tasks(running, restoring int) {
	if r == nil {
		return
	}
	r.tasks.WithLabelValues("running").Set(float64(running))
	r.tasks.WithLabelValues("restoring").Set(float64(restoring))
}

// Standbys sets the gauge of standby tasks.
func (r *Recorder) Standbys(n int) {
	if r != nil {
		r.tasks.WithLabelValues("standby").Set(float64(n))
	}
}

// Rebalanced records a rebalance that started; its duration once every
// assigned task runs.
func (r *Recorder) Rebalanced() {
	if r != nil {
		r.rebalances.Inc()
	}
}

// RebalanceDone records a rebalance's duration.
func (r *Recorder) RebalanceDone(d time.Duration) {
	if r != nil {
		r.rebalanceTime.Observe(d.Seconds())
	}
}

// Restoring records the progress of a restore of partition: read of total
// changelog offsets, records applied since the last call.
func (r *Recorder) Restoring(partition int32, read, total int64, applied int) {
	if r == nil {
		return
	}
	p := part(partition)
	r.restoreRecords.WithLabelValues(p).Add(float64(applied))
	r.restoreRemaining.WithLabelValues(p).Set(float64(max(total-read, 0)))
	ratio := 1.0
	if total > 0 {
		ratio = float64(read) / float64(total)
	}
	r.restoreProgress.WithLabelValues(p).Set(ratio)
}

// Restored records a finished restore.
func (r *Recorder) Restored(partition int32, d time.Duration) {
	if r == nil {
		return
	}
	p := part(partition)
	r.restoreRemaining.WithLabelValues(p).Set(0)
	r.restoreProgress.WithLabelValues(p).Set(1)
	r.restoreTime.Observe(d.Seconds())
}

// Polled records a poll of key on token that began at began and ended
// with err.
func (r *Recorder) Polled(token int32, key []byte, began time.Time, err error) {
	if r == nil {
		return
	}
	p := part(token)
	r.polls.WithLabelValues(p).Inc()
	r.pollTime.Observe(time.Since(began).Seconds())
	if err != nil {
		r.pollErrors.WithLabelValues(p).Inc()
		return
	}
	r.mu.Lock()
	r.cursors[string(key)] = time.Now()
	r.mu.Unlock()
}

// Page records a committed page of records on token.
func (r *Recorder) Page(token int32, recs []*kgo.Record) {
	if r == nil {
		return
	}
	p := part(token)
	r.pages.WithLabelValues(p).Inc()
	r.committed.WithLabelValues(p).Inc()
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && recs[j].Topic == recs[i].Topic {
			j++
		}
		r.recordsOut.WithLabelValues(recs[i].Topic, p).Add(float64(j - i))
		i = j
	}
}

// Attach sets the scrape-time source of a running Run; the returned
// function detaches it.
func (r *Recorder) Attach(s Source) (detach func()) {
	if r == nil {
		return func() {}
	}
	r.mu.Lock()
	r.src, r.lag, r.sbLag = s, nil, nil
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.src, r.lag, r.sbLag = nil, nil, nil
		r.mu.Unlock()
	}
}

// scrape collects the scrape-time values.
type scrape struct{ r *Recorder }

func (s scrape) Describe(ch chan<- *prometheus.Desc) {
	r := s.r
	for _, d := range []*prometheus.Desc{r.lagDesc, r.entriesDesc, r.bytesDesc, r.configDesc, r.cursorAgeDesc, r.standbyLagDesc} {
		ch <- d
	}
}

// entriesEvery is how often a store's keys are counted at most.
const entriesEvery = 30 * time.Second

func (s scrape) Collect(ch chan<- prometheus.Metric) {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.src == nil {
		return
	}
	if time.Since(r.lagAt) >= time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lag, err := r.src.Lag(ctx)
		if err == nil {
			r.lag, r.lagAt = lag, time.Now()
		}
		if sb, ok := r.src.(StandbySource); ok {
			if l, err := sb.StandbyLag(ctx); err == nil {
				r.sbLag = l
			}
		}
		cancel()
	}
	for p, l := range r.sbLag {
		ch <- prometheus.MustNewConstMetric(r.standbyLagDesc, prometheus.GaugeValue, float64(l), part(p))
	}
	for tp, l := range r.lag {
		ch <- prometheus.MustNewConstMetric(r.lagDesc, prometheus.GaugeValue, float64(l), tp.Topic, part(tp.Partition))
	}
	r.src.Stores(func(p int32, st *store.Store) {
		c, ok := r.entries[p]
		if !ok || time.Since(c.at) >= entriesEvery {
			n := 0
			if err := st.Range(func(_, _ []byte) bool { n++; return true }); err == nil {
				c = cachedCount{n, time.Now()}
				r.entries[p] = c
			}
		}
		ch <- prometheus.MustNewConstMetric(r.entriesDesc, prometheus.GaugeValue, float64(c.n), part(p))
		ch <- prometheus.MustNewConstMetric(r.bytesDesc, prometheus.GaugeValue, float64(st.DiskUsage()), part(p))
	})
	if n, live := r.src.Configs(); live != nil {
		ch <- prometheus.MustNewConstMetric(r.configDesc, prometheus.GaugeValue, float64(n))
		var oldest time.Time
		for k, t := range r.cursors {
			if !live([]byte(k)) {
				delete(r.cursors, k)
				continue
			}
			if oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		}
		if !oldest.IsZero() {
			ch <- prometheus.MustNewConstMetric(r.cursorAgeDesc, prometheus.GaugeValue, time.Since(oldest).Seconds())
		}
	}
}

// EntriesChanged forgets the cached key count of partition's store (a
// task moved).
func (r *Recorder) EntriesChanged(partition int32) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.entries, partition)
	r.mu.Unlock()
}
