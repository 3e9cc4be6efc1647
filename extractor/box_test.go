package extractor

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/configtopic"
)

type nilDecoder struct{}

func (nilDecoder) Decode([]byte) (error, error) { return nil, nil }

// The config value travels through the engine as an any; a nil interface
// value of the config type comes back as itself, and a value of another
// type is an error, not a silent zero value.
func TestConfigValueKeepsItsType(t *testing.T) {
	var got []error
	x := New(func(_ context.Context, cfg Config[error], _ int, _ *Emitter[int]) error {
		got = append(got, cfg.Config)
		return nil
	}, ConfigCodec[error](nilDecoder{}), Enrich(func(_ context.Context, _ *configtopic.Record, c error) (error, error) {
		if c == nil {
			return errors.New("enriched"), nil
		}
		return c, nil
	}))
	require.NoError(t, x.Validate())
	ctx := context.Background()

	v, err := x.decodeConfig().Decode([]byte("x"))
	require.NoError(t, err)
	v, err = x.enrichConfig()(ctx, &configtopic.Record{}, v)
	require.NoError(t, err)
	require.NoError(t, x.poll(ctx, configtopic.Entry[any]{Config: v}, nil, false, nil))
	require.Len(t, got, 1)
	require.EqualError(t, got[0], "enriched")

	_, err = x.enrichConfig()(ctx, &configtopic.Record{}, "not a config")
	require.ErrorContains(t, err, "config value is a string")
	err = x.poll(ctx, configtopic.Entry[any]{Config: 42}, nil, false, nil)
	require.ErrorContains(t, err, "config value is a int")
	require.Len(t, got, 1, "the poll function did not run")
}
