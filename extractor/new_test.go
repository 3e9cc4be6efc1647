package extractor_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/transformer"
)

func TestNewReportsEveryProblem(t *testing.T) {
	x := extractor.New[string, int](nil,
		extractor.CursorCodec(transformer.Bytes()),
		extractor.ConfigCodec(configtopic.JSON[int]()))
	err := x.Validate()
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *flechtwerk.ConfigError
		require.ErrorAs(t, e, &ce)
		fields = append(fields, ce.Field)
	}
	require.Equal(t, []string{"Poller", "CursorCodec", "ConfigCodec"}, fields)
}

func TestNilPollersAreReported(t *testing.T) {
	require.ErrorIs(t, extractor.From[string, int](nil).Validate(), flechtwerk.ErrInvalidTransformer)
	require.ErrorIs(t, extractor.From[string, int](extractor.Func[string, int](nil)).Validate(), flechtwerk.ErrInvalidTransformer)
}
