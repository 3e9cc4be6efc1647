package extractor

import (
	"context"

	"github.com/flechtwerk/flechtwerk"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// handle ties a *Stage to its engine view (internal/stage); the
// alias keeps the embedded field unexported.
type handle = stage.Handle

// engineView is the engine's view of a *Stage.
type engineView[C, S any] struct{ x *Stage[C, S] }

func (v engineView[C, S]) Validate() error {
	if v.x == nil {
		return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "extractor", "extractor is nil")
	}
	return v.x.Validate()
}

func (v engineView[C, S]) DecodeConfig() configtopic.Decoder[any]    { return v.x.decodeConfig() }
func (v engineView[C, S]) EnrichConfig() configtopic.EnrichFunc[any] { return v.x.enrichConfig() }
func (v engineView[C, S]) Poll(ctx context.Context, cfg configtopic.Entry[any], cursor []byte, found bool, p stage.Page) error {
	return v.x.poll(ctx, cfg, cursor, found, p)
}
