package transformertest

import (
	"context"
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
	return &Pipeline{partitions: map[string]int32{}, sent: map[string][]transformer.Output{}}
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
	}
	p.stages = append(p.stages, &pipelineStage{name: name, d: d, topics: slices.Clone(topics)})
	return nil
}

// Partitions sets the partition count of topic, 1 by default: a stage's
// output to it goes to the partition Kafka's default partitioner picks for
// its key (murmur2 of the key, as the runner's producers do), a keyless
// output to partition 0. Set the count of a repartition topic to the one
// runner.Pipeline gives it, so that each key's state lives in the task
// (partition) it has in production.
func (p *Pipeline) Partitions(topic string, n int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partitions[topic] = n
}

// Partition returns the partition an output to topic with key goes to
// (see Partitions): the task of the reading stage whose state holds key.
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
// the partition its key maps to, with its headers. An input of a topic no
// stage reads is an error, as is a stage's error (the stage's batch is
// not committed, and Process stops there) and a pipeline that has not
// settled after 1000 hops.
func (p *Pipeline) Process(ctx context.Context, in ...Input) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pending := map[*pipelineStage][]Input{}
	for i, r := range in {
		readers := p.readers(r.Topic)
		if len(readers) == 0 {
			return fmt.Errorf("transformertest: input %d is of topic %q, which no stage reads", i, r.Topic)
		}
		for _, s := range readers {
			pending[s] = append(pending[s], r)
		}
	}
	for hop := 0; len(pending) > 0; hop++ {
		if hop == maxHops {
			return fmt.Errorf("transformertest: the pipeline has not settled after %d hops (a cycle?)", maxHops)
		}
		next := map[*pipelineStage][]Input{}
		for _, s := range p.stages {
			batch := pending[s]
			if len(batch) == 0 {
				continue
			}
			b, err := s.d.Process(ctx, batch...)
			if err != nil {
				return fmt.Errorf("transformertest: stage %q: %w", s.name, err)
			}
			for _, o := range b.Outputs {
				p.sent[o.Topic] = append(p.sent[o.Topic], o)
				readers := p.readers(o.Topic)
				if len(readers) == 0 {
					p.final = append(p.final, o)
					continue
				}
				r := Input{Topic: o.Topic, Partition: p.partition(o.Topic, o.Key), Key: o.Key, Value: o.Value, Headers: o.Headers}
				for _, rd := range readers {
					next[rd] = append(next[rd], r)
				}
			}
		}
		pending = next
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
