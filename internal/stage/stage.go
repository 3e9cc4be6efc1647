package stage

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Op says what a transform call did to its key's state.
type Op uint8

const (
	// Keep leaves the state as it was.
	Keep Op = iota
	// Put replaces the state with Result.State.
	Put
	// Delete removes the state (a tombstone in the changelog).
	Delete
)

// Input is one fetched record as a transformer's stage prepared it: its
// state key, and the stage's own view of the record for Process.
type Input struct {
	// Record is the record as fetched.
	Record *kgo.Record
	// Key is the record's state key.
	Key []byte
	// View is what the stage made of the record (its user-facing form);
	// the engine passes it back to Process untouched.
	View any
}

// Result is what one transform call produced, encoded.
type Result struct {
	Outputs []*kgo.Record
	Op      Op
	State   []byte
}

// Transformer is the engine's view of a transformer.
type Transformer interface {
	// Validate reports a problem found when the transformer was built.
	Validate() error
	// Stateful reports whether the transformer keeps state.
	Stateful() bool
	// Prepare converts a fetched record once and derives its state key.
	Prepare(r *kgo.Record) (Input, error)
	// Process runs the transform for one prepared record. state is the
	// encoded current state of in.Key and found whether there is one.
	Process(ctx context.Context, in Input, state []byte, found bool) (Result, error)
}
