package schemaregistry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/schemaregistry"
)

// FuzzDecode: any bytes decode to a value or to an error; none panics.
// An error is ErrWireFormat (the fake registry is always reachable), and
// a value decoded by a codec re-encodes and decodes to itself.
func FuzzDecode(f *testing.F) {
	fake := srfake.New()
	f.Cleanup(fake.Close)
	cl, err := sr.NewClient(sr.URLs(fake.URL()))
	require.NoError(f, err)
	ctx := context.Background()
	a, err := schemaregistry.Avro[order](cl, "fuzz-avro", orderAvro)
	require.NoError(f, err)
	require.NoError(f, a.Open(ctx))
	j, err := schemaregistry.JSONSchema[order](cl, "fuzz-json", orderJSON)
	require.NoError(f, err)
	require.NoError(f, j.Open(ctx))
	p, err := schemaregistry.Protobuf[*wrapperspb.StringValue](cl, "fuzz-proto", wrappersProto(f))
	require.NoError(f, err)
	require.NoError(f, p.Open(ctx))

	for _, seed := range [][]byte{
		must(a.Encode(order{ID: "o-1", Amount: 42})),
		must(j.Encode(order{ID: "o-1", Amount: 42})),
		must(p.Encode(wrapperspb.String("hello"))),
		{0, 0, 0, 0, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f},
		{0, 0, 0, 0, 3, 3, 1, 2, 3},
		nil,
	} {
		f.Add(seed)
	}
	wire := func(t *testing.T, err error) {
		t.Helper()
		if err != nil && !errors.Is(err, schemaregistry.ErrWireFormat) {
			t.Fatalf("decode error is not ErrWireFormat: %v", err)
		}
		if err != nil {
			require.ErrorIs(t, err, flechtwerk.ErrInvalidRecord)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := a.Decode(b); err == nil {
			again, err := a.Decode(must(a.Encode(v)))
			require.NoError(t, err)
			require.Equal(t, v, again)
		} else {
			wire(t, err)
		}
		if v, err := j.Decode(b); err == nil {
			again, err := j.Decode(must(j.Encode(v)))
			require.NoError(t, err)
			require.Equal(t, v, again)
		} else {
			wire(t, err)
		}
		if v, err := p.Decode(b); err == nil {
			again, err := p.Decode(must(p.Encode(v)))
			require.NoError(t, err)
			require.True(t, proto.Equal(v, again))
		} else {
			wire(t, err)
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
