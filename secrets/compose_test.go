package secrets_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/secrets"
	"github.com/flechtwerk/flechtwerk/sink"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

type sourceConfig struct {
	URL    string `json:"url"`
	APIKey string `json:"api_key"`
}

// The codecs are transformer.Codec values: a transformer's whole state
// is stored sealed in its changelog and decoded back by the runtime; a
// config table and a sink take them as their value codecs.
func TestCodecsCompose(t *testing.T) {
	k := testKeyring(t)
	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
		n++
		out.SetState(n)
		out.Send("counts", rec.Key, []byte(strconv.Itoa(n)))
		return nil
	}, transformer.StateCodec(secrets.Sealed(k, transformer.JSON[int](), secrets.Scope("db"))))
	d, err := transformertest.New(counter)
	require.NoError(t, err)
	for range 3 {
		_, err = d.Process(context.Background(), transformertest.StringInput("in", 0, "fox", "v"))
		require.NoError(t, err)
	}
	raw, ok := d.RawState(0, []byte("fox"))
	require.True(t, ok)
	require.True(t, strings.HasPrefix(string(raw), `"`+secrets.SealPrefix), "the changelog holds a token: %s", raw)
	n, ok, err := transformertest.State[int](d, 0, []byte("fox"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 3, n, "each record saw the state the previous one sealed")

	cfgCodec := secrets.Sealed(k, secrets.Signed(k, transformer.JSON[sourceConfig](), "db"), secrets.Scope("db"))
	var dec configtopic.Decoder[sourceConfig] = cfgCodec
	b, err := cfgCodec.Encode(sourceConfig{URL: "https://api", APIKey: "k-123"})
	require.NoError(t, err)
	got, err := dec.Decode(b)
	require.NoError(t, err)
	require.Equal(t, "k-123", got.APIKey)
	require.NotNil(t, configtopic.Codec(dec))
	require.NotNil(t, sink.ValueCodec(cfgCodec))
}
