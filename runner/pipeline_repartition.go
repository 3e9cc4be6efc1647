package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

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
// any stage starts, as an internal topic of the stage to: with partitions
// partitions, or, when partitions is 0, with the partition count of from's
// input topics (an extractor's: its config topics), as Kafka Streams sizes
// its repartition topics; with cleanup.policy=delete, the broker's default
// retention, and the replication factor of to's
// ChangelogReplicationFactor. A topic that exists already is used when its
// partition count is the one wanted, and is a flechtwerk.CodePartitionMismatch
// error of Run naming it otherwise.
//
// The sending stage sends each record with its new key and no partition:
// the runner's producers partition keyed records with Kafka's default
// murmur2 partitioner, so every record of a key lands on one partition of
// the topic and one task of the reading stage, which sees them in the order
// they were sent. Problems of the declaration (an empty name, from or to
// naming no stage of the pipeline, to not reading the topic, a topic
// declared twice) are reported by Run before anything starts.
func (p *Pipeline) Repartition(name, from, to string, partitions int32) string {
	t := RepartitionTopic(to, name)
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
			bad("partitions must be positive (or 0: those of the sending stage's inputs), is %d", rp.partitions)
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
		if from != nil && rp.partitions == 0 && len(from.sources()) == 0 {
			bad("stage %s reads no topics to size it from: give its partition count", rp.from)
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

// ensureRepartitions creates or checks the repartition topics, in the
// order they were declared (a topic sized from a stage that reads an
// earlier repartition topic sees its count).
func (p *Pipeline) ensureRepartitions(ctx context.Context) error {
	if len(p.parts) == 0 {
		return nil
	}
	to := p.Stage(p.parts[0].to)
	cl, err := kgo.NewClient(to.cfg.ClientOpts()...)
	if err != nil {
		return fmt.Errorf("runner: pipeline %s: admin client: %w", p.name, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	counts := map[string]int32{}
	var errs []error
	for _, rp := range p.parts {
		want := rp.partitions
		if want == 0 {
			if want, err = p.sourcePartitions(ctx, adm, rp, counts); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := ensureTopic(ctx, adm, rp.topic, want, p.Stage(rp.to).cfg.Replication); err != nil {
			errs = append(errs, err)
			continue
		}
		counts[rp.topic] = want
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runner: pipeline %s: repartition topics: %w", p.name, err)
	}
	return nil
}

// sourcePartitions returns the largest partition count of the topics
// rp's sending stage reads.
func (p *Pipeline) sourcePartitions(ctx context.Context, adm *kadm.Client, rp repartition, known map[string]int32) (int32, error) {
	var n int32
	var ask []string
	for _, t := range p.Stage(rp.from).sources() {
		if c, ok := known[t]; ok {
			n = max(n, c)
		} else {
			ask = append(ask, t)
		}
	}
	if len(ask) == 0 {
		return n, nil
	}
	details, err := adm.ListTopics(ctx, ask...)
	if err != nil {
		return 0, fmt.Errorf("describing the inputs of stage %s: %w", rp.from, err)
	}
	var errs []error
	for _, t := range ask {
		d, ok := details[t]
		if !ok || d.Err != nil {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeMissingTopic, "topic "+t,
				"input topic %q of stage %s does not exist: it sizes repartition topic %s", t, rp.from, rp.topic))
			continue
		}
		n = max(n, int32(len(d.Partitions)))
	}
	return n, errors.Join(errs...)
}

// ensureTopic creates topic with partitions partitions and
// cleanup.policy=delete, or checks the partition count of an existing
// one. It returns once the metadata shows the topic; instances that start
// together race to create it, and the losers look again (for up to about
// 15s).
func ensureTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32, replication int16) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), topic)
		if err != nil {
			return fmt.Errorf("describing %s: %w", topic, authz.Wrap(err, "Describe", map[authz.Resource]string{authz.Topic: topic}))
		}
		if d, ok := details[topic]; ok && d.Err == nil {
			if have := int32(len(d.Partitions)); have != partitions {
				return flechtwerk.Errorf(flechtwerk.CodePartitionMismatch, "topic "+topic,
					"repartition topic %s has %d partitions, the pipeline wants %d; repartitioning needs a migration (a new application id, or delete the topic)",
					topic, have, partitions)
			}
			return nil
		}
		_, err = adm.CreateTopic(ctx, partitions, replication, map[string]*string{
			"cleanup.policy": kadm.StringPtr("delete"),
		}, topic)
		// Created (or created by another instance): look again until the
		// metadata shows it, so that the stages find their inputs.
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating %s with %d partitions: %w", topic, partitions,
				authz.Wrap(err, "Create", map[authz.Resource]string{authz.Topic: topic}))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("creating %s: not in the metadata 15s after its creation", topic)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("creating %s: %w", topic, errors.Join(err, ctx.Err()))
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
