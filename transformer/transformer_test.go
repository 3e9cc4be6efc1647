package transformer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

func TestNewReportsEveryProblem(t *testing.T) {
	tr := transformer.New[int](nil, transformer.StateCodec(transformer.Bytes()))
	err := tr.Validate()
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *flechtwerk.ConfigError
		require.ErrorAs(t, e, &ce)
		fields = append(fields, ce.Field)
	}
	require.Equal(t, []string{"Transformer", "StateCodec"}, fields)

	require.NoError(t, transformer.New(func(context.Context, *transformer.Record, int, *transformer.Emitter[int]) error { return nil }).Validate())
	require.ErrorIs(t, transformer.Stateless(nil).Validate(), flechtwerk.ErrInvalidTransformer)
}

// impostor has the user-visible method of a transformer but is not one.
type impostor struct{}

func (impostor) Validate() error { return nil }

func TestOnlyTransformersReachTheEngine(t *testing.T) {
	tr := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil })
	s, ok := stage.TransformerOf(tr)
	require.True(t, ok)
	require.False(t, s.Stateful())

	_, ok = stage.TransformerOf(impostor{})
	require.False(t, ok)
	_, err := runner.NewTransformer(impostor{}, runner.SeedBrokers("localhost:9092"), runner.ApplicationID("app"), runner.InputTopics("in"))
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
	require.ErrorContains(t, err, "transformer_test.impostor is not a stage")

	var nilT *transformer.Stage[int]
	_, err = runner.NewTransformer(nilT, runner.SeedBrokers("localhost:9092"), runner.ApplicationID("app"), runner.InputTopics("in"))
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
	require.ErrorContains(t, err, "transformer is nil")
}

func TestAdapterEncodesWhatTheTransformDid(t *testing.T) {
	tr := transformer.New(func(_ context.Context, rec *transformer.Record, s string, e *transformer.Emitter[string]) error {
		if string(rec.Value) == "fail" {
			return errors.New("boom")
		}
		e.SetState(s + string(rec.Value))
		e.SendRecord(transformer.Output{Topic: "out", Key: rec.Key, Value: rec.Value, Headers: []transformer.Header{{Key: "h", Value: []byte("1")}}})
		return nil
	}, transformer.StateKey(func(rec *transformer.Record) []byte { return rec.Value[:1] }))
	s, ok := stage.TransformerOf(tr)
	require.True(t, ok)
	require.True(t, s.Stateful())
	in, err := s.Prepare(kgoRecord("k", "xy"))
	require.NoError(t, err)
	require.Equal(t, []byte("x"), in.Key)
	res, err := s.Process(context.Background(), in, []byte(`"a"`), true)
	require.NoError(t, err)
	require.Equal(t, stage.Put, res.Op)
	require.Equal(t, `"axy"`, string(res.State))
	require.Len(t, res.Outputs, 1)
	require.Equal(t, int32(-1), res.Outputs[0].Partition, "the partitioner assigns it")
	require.Equal(t, "h", res.Outputs[0].Headers[0].Key)

	_, err = s.Process(context.Background(), in, []byte(`not json`), true)
	require.ErrorContains(t, err, `decoding state of key "x"`)
}

// tally is a user type implementing transformer.Transformer: it counts the
// records of a key and emits the count with its prefix.
type tally struct{ prefix string }

func (t *tally) Transform(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
	n++
	out.SetState(n)
	out.Send("out", rec.Key, []byte(t.prefix+string(rune('0'+n))))
	return nil
}

// shout is a user type implementing transformer.TypedStatelessTransformer.
type shout struct{}

func (shout) Transform(_ context.Context, rec *transformer.TypedRecord[string], out *transformer.Outputs) error {
	out.Send("out", rec.Key, []byte(rec.Value+"!"))
	return nil
}

func TestInterfaceFormsRunTheUsersType(t *testing.T) {
	s, ok := stage.TransformerOf(transformer.From(&tally{prefix: "n="}))
	require.True(t, ok)
	require.True(t, s.Stateful())
	in, err := s.Prepare(kgoRecord("k", "v"))
	require.NoError(t, err)
	res, err := s.Process(context.Background(), in, []byte("1"), true)
	require.NoError(t, err)
	require.Equal(t, stage.Put, res.Op)
	require.Equal(t, "2", string(res.State))
	require.Equal(t, "n=2", string(res.Outputs[0].Value))

	s, ok = stage.TransformerOf(transformer.StatelessTypedFrom[string](shout{}))
	require.True(t, ok)
	require.False(t, s.Stateful())
	in, err = s.Prepare(kgoRecord("k", `"hey"`))
	require.NoError(t, err)
	res, err = s.Process(context.Background(), in, nil, false)
	require.NoError(t, err)
	require.Equal(t, "hey!", string(res.Outputs[0].Value))
}

func TestNilTransformersAreReported(t *testing.T) {
	for name, st := range map[string]runner.Stage{
		"From(nil)":               transformer.From[int](nil),
		"From(nil Func)":          transformer.From[int](transformer.Func[int](nil)),
		"StatelessFrom(nil)":      transformer.StatelessFrom(nil),
		"TypedFrom(nil)":          transformer.TypedFrom[string, int](nil),
		"StatelessTypedFrom(nil)": transformer.StatelessTypedFrom[string](nil),
		"NewTyped(nil)":           transformer.NewTyped[string, int](nil),
	} {
		require.ErrorIs(t, st.Validate(), flechtwerk.ErrInvalidTransformer, name)
	}
}
