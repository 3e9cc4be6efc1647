package stage

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/configtopic"
)

// Extractor is the engine's view of an extractor: a poll function with its
// codecs, over configs and cursors erased to any and bytes.
type Extractor interface {
	// Validate reports a problem found when the extractor was built.
	Validate() error
	// DecodeConfig returns the decoder of the config records' values; a
	// panic of the user's decoder is returned as a *flechtwerk.PanicError.
	DecodeConfig() configtopic.Decoder[any]
	// EnrichConfig returns the enrich hook, nil without one; a panic of
	// the user's hook is returned as a *flechtwerk.PanicError.
	EnrichConfig() configtopic.EnrichFunc[any]
	// Poll runs the poll function once for cfg, from the encoded cursor
	// (found reports whether there is one), sending its records to p.
	// It does not recover panics: the engine does.
	Poll(ctx context.Context, cfg configtopic.Entry[any], cursor []byte, found bool, p Page) error
}

// Page is the open page of one poll, as the extractor's Emitter sees it.
type Page interface {
	// Key is the config key of the poll.
	Key() []byte
	// Add adds a record to the open page: its Partition is -1 for the
	// partitioner, else the partition it goes to.
	Add(r *kgo.Record)
	// Pending returns how many records the open page holds.
	Pending() int
	// Fail makes the poll fail with err, unless it failed already.
	Fail(err error)
	// Commit closes the open page with the encoded cursor.
	Commit(ctx context.Context, cursor []byte) error
}
