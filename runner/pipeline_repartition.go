package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/authz"
)

// RepartitionTopic returns the name of the repartition topic name of the
// stage with application id to (the stage that reads it):
// "{to}-{name}-repartition", as Kafka Streams names its repartition topics
// after the application id.
func RepartitionTopic(to, name string) string { return to + "-" + name + "-repartition" }

// repartition is a repartition topic of a pipeline.
type repartition struct {
	topic, name, from, to string
	partitions            int32
}

// Repartition declares a repartition topic of the pipeline and returns its
// name, RepartitionTopic(to, name): the topic the stage with application
// id from sends its re-keyed records to, and the stage with application id
// to reads (give the name to its InputTopics). Run creates the topic before
// any stage starts, as an internal topic of the stage to, with partitions
// partitions; when partitions is 0, with the partition count of to's other
// input topics (those that are no repartition topic of the pipeline: the
// stage joins them, so they are co-partitioned), else with the largest
// partition count of from's input topics (an extractor's: its config
// topics), as Kafka Streams sizes its repartition topics. A count that
// depends on another repartition topic is known once that one's is: the
// order of the declarations does not matter, a cycle is an error. Run
// checks every count against the other inputs of its reading stage before
// it creates anything (flechtwerk.CodePartitionMismatch).
//
// The topic is created with cleanup.policy=delete, retention.ms=-1 (no
// record is deleted for its age: a replayed old input keeps its
// timestamp) and the replication factor of to's
// ChangelogReplicationFactor; while the pipeline runs, the records every
// stage of the pipeline that reads the topic (lists it in its InputTopics
// or ConfigTopics: to, and any other) has committed are purged every 30s:
// each partition up to the lowest offset their groups committed, and not
// at all while one of them has committed none on it. The topic is
// internal to the pipeline: a consumer outside it is not waited for, and
// may miss purged records. A topic that exists already is used when its
// partition count is the one wanted, its cleanup.policy is delete and its
// retention.ms and retention.bytes are -1, and is an error of Run naming
// it otherwise (flechtwerk.CodePartitionMismatch,
// flechtwerk.CodeRepartitionPolicy). Run returns once every partition of
// every repartition topic has a leader in the metadata.
//
// The sending stage sends each record with its new key and no partition:
// the runner's producers partition keyed records with Kafka's default
// murmur2 partitioner, so every record of a key lands on one partition of
// the topic and one task of the reading stage, which sees them in the order
// they were sent. Problems of the declaration (an empty name, from or to
// naming no stage of the pipeline, to not reading the topic, a topic
// declared twice, counts that depend on each other) are reported by Run
// before anything starts. Repartition must be called before Run, like
// the Add methods: a call after Run started is a programming error and
// panics with a *flechtwerk.ConfigError (flechtwerk.CodeInvalidOption)
// naming the topic; the running pipeline is left alone.
func (p *Pipeline) Repartition(name, from, to string, partitions int32) string {
	t := RepartitionTopic(to, name)
	if p.started.Load() {
		panic(flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Repartition "+t,
			"pipeline %s: Repartition called after Run; declare repartition topics before Run", p.name))
	}
	p.parts = append(p.parts, repartition{topic: t, name: name, from: from, to: to, partitions: partitions})
	return t
}

// validateRepartitions checks the repartition declarations against the
// stages.
func (p *Pipeline) validateRepartitions() []error {
	var errs []error
	seen := map[string]bool{}
	for _, rp := range p.parts {
		field := "Repartition " + rp.topic
		bad := func(format string, args ...any) {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, field, format, args...))
		}
		if rp.name == "" {
			bad("the repartition topic's name is empty")
		}
		if rp.partitions < 0 {
			bad("partitions must be positive (or 0: those of the reading or the sending stage's inputs), is %d", rp.partitions)
		}
		if seen[rp.topic] {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeDuplicateTopic, field, "repartition topic declared twice"))
		}
		seen[rp.topic] = true
		from, to := p.Stage(rp.from), p.Stage(rp.to)
		if from == nil {
			bad("the sending stage %q is no stage of pipeline %s", rp.from, p.name)
		}
		if to == nil {
			bad("the reading stage %q is no stage of pipeline %s", rp.to, p.name)
		} else if !slices.Contains(to.cfg.InputTopics, rp.topic) {
			bad("stage %s does not read it: add it to the stage's InputTopics", rp.to)
		}
		if from != nil && to != nil && rp.partitions == 0 && len(p.sizeSources(rp)) == 0 {
			bad("stage %s reads no topics to size it from: give its partition count", rp.from)
		}
	}
	if len(errs) == 0 {
		if _, err := p.repartitionOrder(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// sources returns the topics a stage reads: its input topics, or its
// config topics (an extractor, a bridge).
func (r *Runner) sources() []string {
	if len(r.cfg.InputTopics) > 0 {
		return r.cfg.InputTopics
	}
	return r.cfg.ConfigTopics
}

// repartitionOf returns the declaration of the repartition topic topic,
// nil when topic is none of the pipeline's.
func (p *Pipeline) repartitionOf(topic string) *repartition {
	for i := range p.parts {
		if p.parts[i].topic == topic {
			return &p.parts[i]
		}
	}
	return nil
}

// external returns the inputs of stage r that are no repartition topic
// of the pipeline.
func (p *Pipeline) external(r *Runner) []string {
	var ts []string
	for _, t := range r.cfg.InputTopics {
		if p.repartitionOf(t) == nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// sizeSources returns the topics rp's partition count comes from when it
// is 0: the reading stage's external inputs, else the sending stage's
// sources.
func (p *Pipeline) sizeSources(rp repartition) []string {
	if ext := p.external(p.Stage(rp.to)); len(ext) > 0 {
		return ext
	}
	return p.Stage(rp.from).sources()
}

// repartitionOrder returns the repartition topics in an order in which
// every topic sized from another repartition topic comes after it, or a
// flechtwerk.CodeInvalidOption error naming the topics of a cycle.
func (p *Pipeline) repartitionOrder() ([]repartition, error) {
	const (
		unseen = iota
		visiting
		done
	)
	mark := make(map[string]int, len(p.parts))
	order := make([]repartition, 0, len(p.parts))
	var visit func(rp repartition, path []string) error
	visit = func(rp repartition, path []string) error {
		switch mark[rp.topic] {
		case done:
			return nil
		case visiting:
			return flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Repartition "+rp.topic,
				"pipeline %s: repartition topics are sized from each other in a cycle (%s): give one its partition count",
				p.name, strings.Join(append(path, rp.topic), " <- "))
		}
		mark[rp.topic] = visiting
		if rp.partitions == 0 {
			for _, t := range p.sizeSources(rp) {
				if dep := p.repartitionOf(t); dep != nil {
					if err := visit(*dep, append(path, rp.topic)); err != nil {
						return err
					}
				}
			}
		}
		mark[rp.topic] = done
		order = append(order, rp)
		return nil
	}
	for _, rp := range p.parts {
		if err := visit(rp, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// repartitionTimeout bounds how long Run waits for a created repartition
// topic to have a leader for every partition in the metadata.
var repartitionTimeout = 30 * time.Second

// ensureRepartitions sizes the repartition topics, checks them against
// the other inputs of their reading stages and against the topics that
// exist, all before it creates any, then creates the missing ones and
// waits until every partition of every one has a leader.
func (p *Pipeline) ensureRepartitions(ctx context.Context, adm *kadm.Client) error {
	if len(p.parts) == 0 {
		return nil
	}
	order, err := p.repartitionOrder()
	if err != nil {
		return err
	}
	// Describe every topic that sizes or is co-partitioned with a
	// repartition topic, and the repartition topics themselves.
	var names []string
	for _, rp := range p.parts {
		names = append(names, rp.topic)
		names = append(names, p.external(p.Stage(rp.to))...)
		if rp.partitions == 0 {
			names = append(names, p.sizeSources(rp)...)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...)
	if err != nil {
		return p.setupErr(fmt.Errorf("describing the topics of the repartition topics: %w",
			authz.Wrap(err, "Describe", map[authz.Resource]string{authz.Topic: strings.Join(names, ",")})))
	}
	// Counts of the existing non-repartition topics; a problem with one
	// is reported once.
	counts := map[string]int32{}
	var errs []error
	reported := map[string]bool{}
	count := func(t, stage, role string) (int32, bool) {
		if n, ok := counts[t]; ok {
			return n, true
		}
		if err := topicErr(details, t); err != nil {
			if !reported[t] {
				reported[t] = true
				errs = append(errs, inputErr(err, t, stage, role))
			}
			return 0, false
		}
		n := int32(len(details[t].Partitions))
		counts[t] = n
		return n, true
	}
	for _, rp := range p.parts {
		for _, t := range p.external(p.Stage(rp.to)) {
			count(t, rp.to, "is co-partitioned with repartition topic "+rp.topic)
		}
	}
	want := map[string]int32{}
	for _, rp := range order {
		if rp.partitions > 0 {
			want[rp.topic] = rp.partitions
			continue
		}
		if ext := p.external(p.Stage(rp.to)); len(ext) > 0 {
			// Co-partitioned with the reading stage's other inputs;
			// unequal ones are reported below.
			if n, ok := count(ext[0], rp.to, "sizes repartition topic "+rp.topic); ok {
				want[rp.topic] = n
			}
			continue
		}
		var n int32
		ok := true
		for _, t := range p.Stage(rp.from).sources() {
			if p.repartitionOf(t) != nil {
				c, known := want[t]
				n, ok = max(n, c), ok && known
				continue
			}
			c, known := count(t, rp.from, "sizes repartition topic "+rp.topic)
			n, ok = max(n, c), ok && known
		}
		if ok {
			want[rp.topic] = n
		}
	}
	if err := errors.Join(errs...); err != nil {
		return p.setupErr(err)
	}
	errs = append(errs, p.checkCopartitioned(want, counts)...)

	// Existing repartition topics: their partition count and policy.
	var existing []string
	for _, rp := range p.parts {
		d, ok := details[rp.topic]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			continue
		}
		if d.Err != nil && kerr.IsRetriable(d.Err) {
			existing = append(existing, rp.topic) // just created: waitLeaders checks its count
			continue
		}
		if d.Err != nil {
			errs = append(errs, fmt.Errorf("describing repartition topic %s: %w", rp.topic,
				authz.Wrap(d.Err, "Describe", map[authz.Resource]string{authz.Topic: rp.topic})))
			continue
		}
		existing = append(existing, rp.topic)
		if have := int32(len(d.Partitions)); have != want[rp.topic] {
			errs = append(errs, mismatch(rp.topic, have, want[rp.topic]))
		}
	}
	if len(existing) > 0 {
		errs = append(errs, checkPolicies(ctx, adm, existing)...)
	}
	if err := errors.Join(errs...); err != nil {
		return p.setupErr(err)
	}

	// Create the missing ones, then wait for their leaders.
	for _, rp := range order {
		if slices.Contains(existing, rp.topic) {
			continue
		}
		_, err := adm.CreateTopic(ctx, want[rp.topic], p.Stage(rp.to).cfg.Replication, map[string]*string{
			"cleanup.policy": kadm.StringPtr("delete"),
			"retention.ms":   kadm.StringPtr("-1"),
		}, rp.topic)
		// Another instance may have created it: the wait checks it.
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return p.setupErr(fmt.Errorf("%w: %w", flechtwerk.Errorf(flechtwerk.CodeTopicCreate, "topic "+rp.topic,
				"creating repartition topic %s with %d partitions failed", rp.topic, want[rp.topic]),
				authz.Wrap(err, "Create", map[authz.Resource]string{authz.Topic: rp.topic})))
		}
	}
	if err := waitLeaders(ctx, adm, want, repartitionTimeout); err != nil {
		return p.setupErr(err)
	}
	return nil
}

// setupErr prefixes an error of the repartition setup.
func (p *Pipeline) setupErr(err error) error {
	return fmt.Errorf("runner: pipeline %s: repartition topics: %w", p.name, err)
}

// topicErr returns the error of topic t in details, kerr.UnknownTopicOrPartition
// when the metadata does not list it.
func topicErr(details kadm.TopicDetails, t string) error {
	d, ok := details[t]
	if !ok {
		return kerr.UnknownTopicOrPartition
	}
	return d.Err
}

// inputErr reports the metadata error err of topic t, which stage reads:
// flechtwerk.CodeMissingTopic when the topic does not exist, else err with
// its cause.
func inputErr(err error, t, stage, role string) error {
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return flechtwerk.Errorf(flechtwerk.CodeMissingTopic, "topic "+t,
			"input topic %q of stage %s does not exist: it %s", t, stage, role)
	}
	return fmt.Errorf("describing input topic %q of stage %s (it %s): %w", t, stage, role,
		authz.Wrap(err, "Describe", map[authz.Resource]string{authz.Topic: t}))
}

func mismatch(topic string, have, want int32) error {
	return flechtwerk.Errorf(flechtwerk.CodePartitionMismatch, "topic "+topic,
		"repartition topic %s has %d partitions, the pipeline wants %d; repartitioning needs a migration (a new application id, or delete the topic)",
		topic, have, want)
}

// checkCopartitioned reports every stage reading a repartition topic
// whose inputs would have unequal partition counts: the stage would fail
// on them once the topics exist.
func (p *Pipeline) checkCopartitioned(want, counts map[string]int32) []error {
	var errs []error
	for _, r := range p.stages {
		reads := false
		for _, t := range r.cfg.InputTopics {
			reads = reads || p.repartitionOf(t) != nil
		}
		if !reads {
			continue
		}
		var parts []string
		equal := true
		var first int32 = -1
		for _, t := range r.cfg.InputTopics {
			n, ok := want[t]
			if !ok {
				n, ok = counts[t]
			}
			if !ok {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s (%d)", t, n))
			if first >= 0 && n != first {
				equal = false
			}
			if first < 0 {
				first = n
			}
		}
		if !equal {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodePartitionMismatch, "stage "+r.cfg.ApplicationID,
				"stage %s would read topics with unequal partition counts: %s; give the repartition topics the count of the stage's other inputs",
				r.cfg.ApplicationID, strings.Join(parts, ", ")))
		}
	}
	return errs
}

// checkPolicies refuses existing repartition topics whose cleanup.policy
// is not delete, or whose retention.ms or retention.bytes is not -1: the
// broker would delete records their readers have not read yet. A config
// the broker does not describe counts as Kafka's default (cleanup.policy
// delete, retention.ms 7 days, retention.bytes -1).
func checkPolicies(ctx context.Context, adm *kadm.Client, topics []string) []error {
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return []error{fmt.Errorf("describing the configs of %s: %w", strings.Join(topics, ", "),
			authz.Wrap(err, "DescribeConfigs", map[authz.Resource]string{authz.Topic: strings.Join(topics, ",")}))}
	}
	var errs []error
	for _, t := range topics {
		rc, err := rcs.On(t, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("describing the configs of %s: %w", t,
				authz.Wrap(err, "DescribeConfigs", map[authz.Resource]string{authz.Topic: t})))
			continue
		}
		cfg := map[string]string{"cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1"}
		for _, c := range rc.Configs {
			if _, ok := cfg[c.Key]; ok {
				cfg[c.Key] = c.MaybeValue()
			}
		}
		if policy := cfg["cleanup.policy"]; policy != "delete" {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeRepartitionPolicy, "topic "+t,
				"repartition topic %s has cleanup.policy=%s; it must be delete (set it, or delete the topic)", t, policy))
		}
		for _, key := range []string{"retention.ms", "retention.bytes"} {
			if v := cfg[key]; v != "-1" {
				errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeRepartitionPolicy, "topic "+t,
					"repartition topic %s has %s=%s; it must be -1, or the broker deletes records before the stages read them "+
						"(kafka-configs --alter --entity-type topics --entity-name %s --add-config %s=-1)", t, key, v, t, key))
			}
		}
	}
	return errs
}

// waitLeaders waits until the metadata lists every topic of want with its
// partition count and a leader for every partition, looking again every
// 50ms for up to timeout. A topic another instance created with another
// count is a flechtwerk.CodePartitionMismatch error; a topic not ready in
// time a flechtwerk.CodeTopicCreate one naming it.
func waitLeaders(ctx context.Context, adm *kadm.Client, want map[string]int32, timeout time.Duration) error {
	topics := slices.Sorted(maps.Keys(want))
	deadline := time.Now().Add(timeout)
	for {
		// WithAuthorizedOps: a direct request, not the client's cached
		// metadata (which may predate the creation).
		details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), topics...)
		var notReady []string
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			notReady = topics
		} else {
			for _, t := range topics {
				d, ok := details[t]
				if !ok || d.Err != nil || len(d.Partitions) == 0 {
					notReady = append(notReady, t)
					continue
				}
				if have := int32(len(d.Partitions)); have != want[t] {
					return mismatch(t, have, want[t])
				}
				for _, pd := range d.Partitions {
					if pd.Leader < 0 || pd.Err != nil {
						notReady = append(notReady, t)
						break
					}
				}
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var errs []error
			for _, t := range notReady {
				errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeTopicCreate, "topic "+t,
					"repartition topic %s: not every partition has a leader in the metadata %s after its creation", t, timeout))
			}
			if err != nil {
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Handler returns the pipeline's operations endpoints: /healthz and
// /readyz answer 200 when every stage is healthy (ready), else 503, with
// one line per stage, "{application id}: ok" or "{application id}: " and
// why not; /metrics serves g (usually the registry given to Metrics; nil
// serves no /metrics).
func (p *Pipeline) Handler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	probe := func(check func(*Runner) error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			var b strings.Builder
			ok := len(p.stages) > 0
			for _, r := range p.stages {
				if err := check(r); err != nil {
					ok = false
					fmt.Fprintf(&b, "%s: %s\n", r.cfg.ApplicationID, strings.ReplaceAll(err.Error(), "\n", "; "))
				} else {
					fmt.Fprintf(&b, "%s: ok\n", r.cfg.ApplicationID)
				}
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			_, _ = w.Write([]byte(b.String()))
		}
	}
	mux.Handle("/healthz", probe((*Runner).Healthy))
	mux.Handle("/readyz", probe((*Runner).Ready))
	if g != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	return mux
}

// purgeInterval is how often a running pipeline deletes the records of
// its repartition topics that every stage reading them committed, as
// Kafka Streams' repartition.purge.interval.ms (30s) does.
var purgeInterval = 30 * time.Second

// readers returns the stages of the pipeline that read topic: those that
// list it in their InputTopics or ConfigTopics.
func (p *Pipeline) readers(topic string) []*Runner {
	var rs []*Runner
	for _, r := range p.stages {
		if slices.Contains(r.cfg.InputTopics, topic) || slices.Contains(r.cfg.ConfigTopics, topic) {
			rs = append(rs, r)
		}
	}
	return rs
}

// purger deletes the committed records of the repartition topics.
type purger struct {
	p   *Pipeline
	adm *kadm.Client
	// done holds, per topic and partition, the offset records were
	// deleted below.
	done map[string]map[int32]int64
}

// run purges every purgeInterval until ctx ends. A failed purge is
// logged and tried again at the next interval; it never ends Run.
func (pg *purger) run(ctx context.Context) {
	t := time.NewTicker(purgeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Each group's offsets are fetched once a round.
		fetched := map[string]kadm.OffsetResponses{}
		for _, rp := range pg.p.parts {
			if err := pg.purge(ctx, rp, fetched); err != nil && ctx.Err() == nil {
				pg.p.Stage(rp.to).cfg.Logger.Warn("purging a repartition topic failed; retrying at the next interval",
					"topic", rp.topic, "err", err)
			}
		}
	}
}

// purge deletes the records of rp's topic that every stage reading it
// has committed: per partition, below the lowest offset the readers'
// groups committed, and nothing of a partition for which one of them has
// committed no offset. fetched caches the groups' offsets of this round.
func (pg *purger) purge(ctx context.Context, rp repartition, fetched map[string]kadm.OffsetResponses) error {
	var low map[int32]int64
	for i, r := range pg.p.readers(rp.topic) {
		group := r.cfg.Group()
		resp, ok := fetched[group]
		if !ok {
			var err error
			if resp, err = pg.adm.FetchOffsets(ctx, group); err != nil {
				return fmt.Errorf("fetching the offsets of group %s: %w", group,
					authz.Wrap(err, "Describe", map[authz.Resource]string{authz.Group: group, authz.Topic: rp.topic}))
			}
			fetched[group] = resp
		}
		committed := map[int32]int64{}
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Topic == rp.topic && o.Err == nil && o.At > 0 {
				committed[o.Partition] = o.At
			}
		})
		if i == 0 {
			low = committed
			continue
		}
		for part, at := range low {
			c, ok := committed[part]
			if !ok {
				delete(low, part)
				continue
			}
			low[part] = min(at, c)
		}
	}
	var del kadm.Offsets
	for part, at := range low {
		if at > pg.done[rp.topic][part] {
			del.Add(kadm.Offset{Topic: rp.topic, Partition: part, At: at, LeaderEpoch: -1})
		}
	}
	if len(del) == 0 {
		return nil
	}
	res, err := pg.adm.DeleteRecords(ctx, del)
	if err != nil {
		return fmt.Errorf("deleting records: %w", authz.Wrap(err, "Delete", map[authz.Resource]string{authz.Topic: rp.topic}))
	}
	var errs []error
	res.Each(func(r kadm.DeleteRecordsResponse) {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("partition %d: %w", r.Partition,
				authz.Wrap(r.Err, "Delete", map[authz.Resource]string{authz.Topic: r.Topic})))
			return
		}
		if pg.done[r.Topic] == nil {
			pg.done[r.Topic] = map[int32]int64{}
		}
		if o, ok := del.Lookup(r.Topic, r.Partition); ok {
			pg.done[r.Topic][r.Partition] = o.At
		}
	})
	return errors.Join(errs...)
}
