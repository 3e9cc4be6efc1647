package schemaregistry_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/schemaregistry"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// The codecs as a stateful transformer's input, output and state codecs:
// Confluent-framed values decode, the state round-trips through the store
// in the wire format, and a value without the magic byte is an invalid
// record (the runner's invalid-record policy applies).
func TestTransformerInputOutputState(t *testing.T) {
	reg := registries(t)[0]
	ctx := context.Background()
	tp := topic(t)
	in, err := schemaregistry.Avro[order](reg.cl, tp, orderAvro)
	open(t, in, err)
	out, err := schemaregistry.Avro[order](reg.cl, tp+"-totals", orderAvro)
	open(t, out, err)
	state, err := schemaregistry.Avro[order](reg.cl, "", orderAvro, schemaregistry.Subject(tp+"-state"))
	open(t, state, err)

	stage := transformer.NewTyped(func(_ context.Context, rec *transformer.TypedRecord[order], s order, e *transformer.Emitter[order]) error {
		s.ID = rec.Value.ID
		s.Amount += rec.Value.Amount
		e.SetState(s)
		b, err := out.Encode(s)
		if err != nil {
			return err
		}
		e.Send(tp+"-totals", rec.Key, b)
		return nil
	}, transformer.InputCodec[order](in), transformer.StateCodec[order](state))
	d, err := transformertest.New(stage)
	require.NoError(t, err)

	var inputs []transformertest.Input
	for _, amount := range []int64{3, 4} {
		b, err := in.Encode(order{ID: "c-1", Amount: amount})
		require.NoError(t, err)
		inputs = append(inputs, transformertest.Input{Topic: tp, Key: []byte("c-1"), Value: b})
	}
	batch, err := d.Process(ctx, inputs...)
	require.NoError(t, err)
	require.Len(t, batch.Outputs, 2)
	total, err := out.Decode(batch.Outputs[1].Value)
	require.NoError(t, err)
	require.Equal(t, order{ID: "c-1", Amount: 7}, total)

	raw, ok := d.RawState(0, []byte("c-1"))
	require.True(t, ok)
	require.Equal(t, byte(0), raw[0], "state is stored in the wire format")
	s, ok, err := transformertest.State[order](d, 0, []byte("c-1"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, order{ID: "c-1", Amount: 7}, s)

	_, err = d.Process(ctx, transformertest.Input{Topic: tp, Key: []byte("c-1"), Value: []byte(`{"id":"c-1","amount":1}`)})
	var invalid *flechtwerk.InvalidRecordError
	require.ErrorAs(t, err, &invalid)
	require.Equal(t, flechtwerk.PartValue, invalid.Part)
	require.ErrorIs(t, err, schemaregistry.ErrWireFormat)
	require.ErrorContains(t, err, "no Confluent header")
}
