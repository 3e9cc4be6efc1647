package process

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Op says what a Process call did to its key's state.
type Op uint8

const (
	// Keep leaves the state as it was.
	Keep Op = iota
	// Put replaces the state with Result.State.
	Put
	// Delete removes the state (a tombstone in the changelog).
	Delete
)

// Input is one fetched record as a Processor prepared it: its state key,
// and the processor's own view of the record for Process.
type Input struct {
	// Record is the record as fetched.
	Record *kgo.Record
	// Key is the record's state key.
	Key []byte
	// View is what the processor made of the record (its user-facing
	// form); the task passes it back to Process untouched.
	View any
}

// Result is what one Process call produced, encoded.
type Result struct {
	// Outputs are the records to produce in the task's transaction. The
	// partitioner places them: the processor's own for the topic when it
	// has a method
	// Partitioners() map[string]func(key []byte, partitions int32) int32,
	// else murmur2 of the key, as Kafka's default partitioner (records
	// without a key stick to a partition per produce batch). Their
	// Partition is ignored (a &kgo.Record{Topic, Key, Value} is hashed
	// by its key, not sent to partition 0) unless the processor has a
	// method ExplicitPartitions() bool that returns true: then a record
	// whose Partition is 0 or more goes to that partition (one out of
	// its topic's range fails the transaction with a
	// *flechtwerk.OutputError), and -1 asks the partitioner.
	Outputs []*kgo.Record
	// Op is what happened to the state of the input's key.
	Op Op
	// State is the new encoded state when Op is Put.
	State []byte
	// Stamp, unless IsZero, is kept with a Put's state, in the store and
	// on its changelog record, and read back by State.Stamp: the time of
	// the Put (a state TTL's clock) and the key's carried timers.
	Stamp Stamp
	// Moved, in a Fire result, says the timer did not fire: its key's
	// Stamp carries it due later, and Timers moves it there. The result
	// holds nothing else.
	Moved bool
	// Writes are writes to named stores, any key of the task's
	// partition (a Stores processor only). The last write per store
	// and key of a transaction is what its changelog gets.
	Writes []StoreWrite
	// Timers set, replace or cancel timers of any key of the task's
	// partition (a Stores processor only).
	Timers []TimerOp
}

// Processor is what a task runs: a transformer as the engine sees it.
type Processor interface {
	// Validate reports a problem found when the processor was built.
	Validate() error
	// Stateful reports whether the processor keeps state (a stateless
	// one opens no store and writes no changelog).
	Stateful() bool
	// Prepare converts a fetched record once and derives its state key.
	Prepare(r *kgo.Record) (Input, error)
	// Process runs the transform for one prepared record. state is the
	// encoded current state of in.Key and found whether there is one.
	Process(ctx context.Context, in Input, state []byte, found bool) (Result, error)
}
