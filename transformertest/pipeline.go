package transformertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/transformer"
)

// Pipeline runs the stages of a runner.Pipeline (transformers, each in
// its own Driver) without Kafka: inputs go to the stages that read their
// topic, and each stage's outputs go on to the stages that read the
// output's topic, until no stage has anything left to process. Outputs to
// topics that no stage reads are the pipeline's final outputs. Build it
// with NewPipeline and Add; it is safe for concurrent use, though Process
// calls run one at a time.
type Pipeline struct {
	mu         sync.Mutex
	stages     []*pipelineStage
	partitions map[string]int32
	sent       map[string][]transformer.Output
	final      []transformer.Output
	// pending are the inputs each stage has yet to process: records
	// committed to its topics that a stage error left unread, as they
	// stay in Kafka.
	pending   map[*pipelineStage][]Input
	processed bool // Process was called: no more Add
}

type pipelineStage struct {
	name   string
	d      *Driver
	topics []string
}

// maxHops bounds the hops of one Process call: a stage that feeds itself,
// directly or through others, without end is an error, not a hang.
const maxHops = 1000

// NewPipeline returns an empty pipeline.
func NewPipeline() *Pipeline {
	return &Pipeline{partitions: map[string]int32{}, sent: map[string][]transformer.Output{},
		pending: map[*pipelineStage][]Input{}}
}

// Add adds stage name, the transformer d runs, reading topics (as the
// stage's runner.InputTopics). It is an error to add a name twice, to give
// no topics, or to add a stage after the first Process.
func (p *Pipeline) Add(name string, d *Driver, topics ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case d == nil:
		return fmt.Errorf("transformertest: stage %q: the driver is nil", name)
	case len(topics) == 0:
		return fmt.Errorf("transformertest: stage %q reads no topics", name)
	case p.stage(name) != nil:
		return fmt.Errorf("transformertest: stage %q added twice", name)
	case p.processed:
		return fmt.Errorf("transformertest: stage %q added after Process; add every stage first", name)
	}
	p.stages = append(p.stages, &pipelineStage{name: name, d: d, topics: slices.Clone(topics)})
	return nil
}

// Partitions sets the partition count of topic, 1 by default. It is the
// count of topic of every stage's Driver that does not set one of its own
// (OutputPartitions): a stage's output to topic goes to the partition its
// Driver reports (Output.Partition: its explicit one, its topic's
// partitioner's, or Kafka's default murmur2 of its key, as the runner's
// producers do), and is an input of the reading stages at that partition.
// Set the count of a repartition topic to the one runner.Pipeline gives
// it, so that each key's state lives in the task (partition) it has in
// production. A Driver whose own count of topic differs is an error of
// Process.
func (p *Pipeline) Partitions(topic string, n int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partitions[topic] = n
}

// Partition returns the partition an output to topic with key goes to
// under Kafka's default partitioner and the count set with Partitions:
// the task of the reading stage whose state holds key.
func (p *Pipeline) Partition(topic string, key []byte) int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.partition(topic, key)
}

func (p *Pipeline) partition(topic string, key []byte) int32 {
	n := max(p.partitions[topic], 1)
	if key == nil || n == 1 {
		return 0
	}
	r := &kgo.Record{Key: key}
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(r, int(n)))
}

// Stage returns the driver of stage name (for its State, Outputs,
// Committed), nil when the pipeline has none.
func (p *Pipeline) Stage(name string) *Driver {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.stage(name); s != nil {
		return s.d
	}
	return nil
}

func (p *Pipeline) stage(name string) *pipelineStage {
	for _, s := range p.stages {
		if s.name == name {
			return s
		}
	}
	return nil
}

// Process feeds in to the stages that read their topics and runs the
// pipeline until every output reached a topic no stage reads. Each hop is
// one batch of each stage that has inputs (Driver.Process), stages in the
// order they were added; an output of a hop is an input of the next, at
// the partition its stage's Driver reports for it (see Partitions), with
// its timestamp and headers. An input of a topic no stage reads is an
// error (and nothing of in is processed), as is a stage's error (the
// stage's batch is not committed, and Process stops there) and a pipeline
// that has not settled after 1000 hops. After an error, the inputs no
// stage committed yet stay pending, as records stay in their Kafka topics:
// the next Process delivers them first (give it no inputs to just retry).
func (p *Pipeline) Process(ctx context.Context, in ...Input) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.processed = true
	for i, r := range in {
		if len(p.readers(r.Topic)) == 0 {
			return fmt.Errorf("transformertest: input %d is of topic %q, which no stage reads", i, r.Topic)
		}
	}
	if err := p.applyPartitions(); err != nil {
		return err
	}
	for _, r := range in {
		for _, s := range p.readers(r.Topic) {
			p.pending[s] = append(p.pending[s], r)
		}
	}
	for hop := 0; len(p.pending) > 0; hop++ {
		if hop == maxHops {
			return fmt.Errorf("transformertest: the pipeline has not settled after %d hops (a cycle?)", maxHops)
		}
		cur := p.pending
		p.pending = map[*pipelineStage][]Input{}
		for i, s := range p.stages {
			batch := cur[s]
			if len(batch) == 0 {
				continue
			}
			b, err := s.d.Process(ctx, batch...)
			if err != nil {
				// This stage's batch and those of the stages after it
				// are unread, before what this hop sent them.
				for _, rest := range p.stages[i:] {
					if len(cur[rest]) > 0 {
						p.pending[rest] = append(cur[rest], p.pending[rest]...)
					}
				}
				return fmt.Errorf("transformertest: stage %q: %w", s.name, err)
			}
			for _, o := range b.Outputs {
				p.sent[o.Topic] = append(p.sent[o.Topic], o)
				readers := p.readers(o.Topic)
				if len(readers) == 0 {
					p.final = append(p.final, o)
					continue
				}
				part, ok := o.Partition()
				if !ok {
					part = p.partition(o.Topic, o.Key)
				}
				r := Input{Topic: o.Topic, Partition: part, Key: o.Key, Value: o.Value,
					Headers: o.Headers, Timestamp: o.Timestamp}
				for _, rd := range readers {
					p.pending[rd] = append(p.pending[rd], r)
				}
			}
		}
	}
	return nil
}

// applyPartitions gives every stage's Driver the partition counts set
// with Partitions, unless it has its own (OutputPartitions), which must
// agree.
func (p *Pipeline) applyPartitions() error {
	for _, s := range p.stages {
		if err := s.d.setPartitions(p.partitions); err != nil {
			return fmt.Errorf("transformertest: stage %q: %w", s.name, err)
		}
	}
	return nil
}

// readers returns the stages that read topic.
func (p *Pipeline) readers(topic string) []*pipelineStage {
	var out []*pipelineStage
	for _, s := range p.stages {
		if slices.Contains(s.topics, topic) {
			out = append(out, s)
		}
	}
	return out
}

// Outputs returns the pipeline's final outputs so far (to topics no stage
// reads), in the order they were committed.
func (p *Pipeline) Outputs() []transformer.Output {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.final)
}

// Sent returns every output sent to topic so far, intermediate topics
// (a repartition topic) included, in the order they were committed.
func (p *Pipeline) Sent(topic string) []transformer.Output {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sent[topic])
}

// Close closes every stage's Driver (Driver.Close), in the order the
// stages were added, and returns their errors joined.
func (p *Pipeline) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, s := range p.stages {
		if err := s.d.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stage %s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}
