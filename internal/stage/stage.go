package stage

import (
	"sync"

	"github.com/flechtwerk/flechtwerk/task/process"
)

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

var (
	mu           sync.RWMutex
	transformers []func(any) (Transformer, bool)
)

// RegisterTransformer adds a lookup that recognizes a user-facing
// transformer value and returns its engine view. Packages that define
// transformers call it from init.
func RegisterTransformer(lookup func(v any) (Transformer, bool)) {
	mu.Lock()
	defer mu.Unlock()
	transformers = append(transformers, lookup)
}

// TransformerOf returns the engine view of v when v is a transformer.
func TransformerOf(v any) (Transformer, bool) {
	mu.RLock()
	defer mu.RUnlock()
	for _, lookup := range transformers {
		if t, ok := lookup(v); ok {
			return t, true
		}
	}
	return nil, false
}
