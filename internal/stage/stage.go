package stage

import "github.com/flechtwerk/flechtwerk/task/process"

// The engine's view of a transformer is the public contract of package
// task (package task/process): the names below are aliases of it.

// Op says what a transform call did to its key's state.
type Op = process.Op

const (
	// Keep leaves the state as it was.
	Keep = process.Keep
	// Put replaces the state with Result.State.
	Put = process.Put
	// Delete removes the state (a tombstone in the changelog).
	Delete = process.Delete
)

// Input is one fetched record as a transformer's stage prepared it: its
// state key, and the stage's own view of the record for Process.
type Input = process.Input

// Result is what one transform call produced, encoded.
type Result = process.Result

// Transformer is the engine's view of a transformer: a process.Processor.
type Transformer = process.Processor

// OutputSpec is an output topic a transformer declared: Run checks at
// start that it exists, or creates it when Create is set.
type OutputSpec struct {
	Topic string
	// Create asks for the topic to be created, when missing, with
	// Partitions partitions and Config.
	Create     bool
	Partitions int32
	Config     map[string]string
}

// Outputs is implemented by the view of a transformer stage: its declared
// output topics, the partitioners of its output topics (by topic), and
// the codecs it encodes with (state, declared keys and values; not the
// input codec, which only decodes; the runner opens those that implement
// flechtwerk.Lifecycle).
type Outputs interface {
	Outputs() []OutputSpec
	Partitioners() map[string]func(key []byte, partitions int32) int32
	Codecs() []any
}
