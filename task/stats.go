package task

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/store"
)

// Stats sum up one commit of a task, for metrics: the input records of the
// batches it committed (transaction markers excluded) and their key plus
// value bytes per input topic, its outputs, its changelog writes (the last
// write per key of the transaction) and the records the invalid-record
// policy handled in it. An offsets-only commit has inputs and policy
// counts only.
type Stats struct {
	inputs        []topicInput
	outputs       []topicInput
	writes        []store.Write
	invalid       invalidCounts
	transactional bool
	fired         int
}

// Fired returns how many timers fired in the commit.
func (s *Stats) Fired() int { return s.fired }

type topicInput struct {
	topic   string
	records int
	bytes   int64
}

type invalidCounts struct{ skipped, substituted, dead int }

func (c *invalidCounts) add(o invalidCounts) {
	c.skipped += o.skipped
	c.substituted += o.substituted
	c.dead += o.dead
}

// Inputs calls fn for every input topic with records in the commit.
func (s *Stats) Inputs(fn func(topic string, records int, bytes int64)) {
	for _, in := range s.inputs {
		fn(in.topic, in.records, in.bytes)
	}
}

// Outputs calls fn for every output topic with records in the commit:
// the output records and their key plus value bytes.
func (s *Stats) Outputs(fn func(topic string, records int, bytes int64)) {
	for _, out := range s.outputs {
		fn(out.topic, out.records, out.bytes)
	}
}

// StateWrites returns the changelog writes of the commit (puts and
// tombstones, one per key).
func (s *Stats) StateWrites() int { return len(s.writes) }

// StateValues calls fn with the value size of every state put of the
// commit (not tombstones).
func (s *Stats) StateValues(fn func(n int)) {
	for _, w := range s.writes {
		if !w.Delete {
			fn(len(w.Value))
		}
	}
}

// Invalid returns the records the invalid-record policy handled in the
// commit, by outcome.
func (s *Stats) Invalid() (skipped, substituted, deadLettered int) {
	return s.invalid.skipped, s.invalid.substituted, s.invalid.dead
}

// Transactional reports whether the commit was a transaction (CommitOpen)
// rather than offsets committed through the group member.
func (s *Stats) Transactional() bool { return s.transactional }

// addInputs counts recs (markers excluded) into ins per topic.
func addInputs(ins []topicInput, recs []*kgo.Record) []topicInput {
	i := -1
	for _, r := range recs {
		if r.Attrs.IsControl() {
			continue
		}
		if i < 0 || ins[i].topic != r.Topic {
			i = findInput(ins, r.Topic)
			if i < 0 {
				ins = append(ins, topicInput{topic: r.Topic})
				i = len(ins) - 1
			}
		}
		ins[i].records++
		ins[i].bytes += int64(len(r.Key) + len(r.Value))
	}
	return ins
}

// addOutput counts an output record of bytes to topic into outs.
func addOutput(outs []topicInput, topic string, bytes int64) []topicInput {
	i := len(outs) - 1
	if i < 0 || outs[i].topic != topic {
		if i = findInput(outs, topic); i < 0 {
			outs = append(outs, topicInput{topic: topic})
			i = len(outs) - 1
		}
	}
	outs[i].records++
	outs[i].bytes += bytes
	return outs
}

func findInput(ins []topicInput, topic string) int {
	for i := range ins {
		if ins[i].topic == topic {
			return i
		}
	}
	return -1
}

// mergeInputs adds the inputs of a batch to those of the open interval.
func mergeInputs(into, from []topicInput) []topicInput {
	for _, in := range from {
		if i := findInput(into, in.topic); i >= 0 {
			into[i].records += in.records
			into[i].bytes += in.bytes
		} else {
			into = append(into, in)
		}
	}
	return into
}
