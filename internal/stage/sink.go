package stage

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Delivery is the delivery mode a sink declared.
type Delivery int

const (
	// Unset: the sink declared no mode.
	Unset Delivery = iota
	// AtLeastOnce: offsets are committed once what they produced is
	// durably written.
	AtLeastOnce
	// AtMostOnce: offsets are committed on a timer, decoupled from
	// writing.
	AtMostOnce
)

func (d Delivery) String() string {
	switch d {
	case AtLeastOnce:
		return "at-least-once"
	case AtMostOnce:
		return "at-most-once"
	case Unset:
		return "unset"
	}
	return "unknown"
}

// Output is one value to write, as the sink's stage prepared it. The
// engine passes it back to Write untouched.
type Output any

// Sink is the engine's view of a sink.
type Sink interface {
	// Validate reports a problem found when the sink was built.
	Validate() error
	// Delivery returns the declared delivery mode.
	Delivery() Delivery
	// Prepare decodes a fetched record and returns what is to be
	// written for it: zero, one or more outputs. A panic of user code
	// is returned as a *flechtwerk.PanicError.
	Prepare(ctx context.Context, r *kgo.Record) ([]Output, error)
	// Write writes outputs of Prepare (of one partition, in offset
	// order) and returns once they are durable. A panic of user code is
	// returned as a *flechtwerk.PanicError.
	Write(ctx context.Context, outs []Output) error
	// Resume returns the explicit resume state for the partitions of
	// topic: the next offset to read, by partition, for those the sink
	// knows; nil without a resume hook.
	Resume(ctx context.Context, topic string, partitions []int32) (map[int32]int64, error)
	// HasResume reports whether the sink has a resume hook.
	HasResume() bool
}
