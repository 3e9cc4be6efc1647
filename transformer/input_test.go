package transformer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/transformer"
)

func TestInputCodecMustMatchAndNeedsATypedTransformer(t *testing.T) {
	typed := transformer.NewTyped(func(context.Context, *transformer.TypedRecord[int], int, *transformer.Emitter[int]) error { return nil },
		transformer.InputCodec(transformer.Bytes()))
	err := typed.Validate()
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
	require.Contains(t, err.Error(), "InputCodec")

	untyped := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil },
		transformer.InputCodec(transformer.JSON[int]()))
	require.ErrorIs(t, untyped.Validate(), flechtwerk.ErrInvalidTransformer)

	ok := transformer.StatelessTyped(func(context.Context, *transformer.TypedRecord[[]byte], *transformer.Outputs) error { return nil },
		transformer.InputCodec(transformer.Bytes()))
	require.NoError(t, ok.Validate())
}

func TestInvalidRecordErrorMatchesAndNamesThePart(t *testing.T) {
	err := transformer.InvalidHeader("h", errors.New("bad"))
	require.ErrorIs(t, err, transformer.ErrInvalidRecord)
	ie := &transformer.InvalidRecordError{Topic: "t", Partition: 2, Offset: 7, Part: transformer.PartHeader, Header: "h",
		Headers: []transformer.Header{{Key: "h", Value: []byte("raw")}}, Err: errors.New("bad")}
	require.Equal(t, []byte("raw"), ie.Raw())
	require.Contains(t, ie.Error(), `topic t partition 2 offset 7`)
	require.Contains(t, ie.Error(), `invalid header "h": bad`)
}
