package batch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// typed decodes JSON ints, rejects a negative one's key and emits the rest.
func typed(t *testing.T) stage.Transformer {
	tr := transformer.StatelessTyped(func(_ context.Context, r *transformer.TypedRecord[int], o *transformer.Outputs) error {
		if r.Value < 0 {
			return transformer.InvalidKey(errors.New("negative"))
		}
		o.Send("out", r.Key, r.Record.Value)
		return nil
	})
	s, ok := stage.TransformerOf(tr)
	require.True(t, ok)
	return s
}

func run(t *testing.T, pol *batch.Policy, recs ...*kgo.Record) (*batch.Result, error) {
	return batch.Run(context.Background(), batch.Params{
		Transformer: typed(t), Policy: pol, Partition: 2, Sem: make(chan struct{}, 2), Name: "task 2",
	}, recs)
}

func TestDeadLetterRecordIsAnOutputWithKIP1034Headers(t *testing.T) {
	pol := &batch.Policy{Mode: batch.DeadLetter, DeadLetterTopic: "dlq"}
	bad := rec("a", 4, "x", "{nope")
	bad.Headers = []kgo.RecordHeader{{Key: "orig", Value: []byte("1")}}
	res, err := run(t, pol, rec("a", 3, "x", "1"), bad, rec("a", 5, "y", "-1"))
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"a": 6}, res.Offsets)
	require.Len(t, res.Outputs, 3)
	var dl []*kgo.Record
	for _, o := range res.Outputs {
		if o.Topic == "dlq" {
			dl = append(dl, o)
		}
	}
	require.Len(t, dl, 2)
	h := map[string]string{}
	for _, x := range dl[0].Headers {
		h[x.Key] = string(x.Value)
	}
	require.Equal(t, "{nope", string(dl[0].Value))
	require.Equal(t, "x", string(dl[0].Key))
	require.Equal(t, "1", h["orig"])
	require.Equal(t, "a", h[batch.HeaderTopic])
	require.Equal(t, "2", h[batch.HeaderPartition])
	require.Equal(t, "4", h[batch.HeaderOffset])
	require.Equal(t, "*json.SyntaxError", h[batch.HeaderException])
	require.Contains(t, h[batch.HeaderMessage], "invalid value")
	require.NotEmpty(t, h[batch.HeaderStacktrace])
	require.Equal(t, "value", h[batch.HeaderPart])
	require.Equal(t, int64(2), pol.DeadLettered.Load())
}

func TestSubstituteNeverSubstitutesAKey(t *testing.T) {
	pol := &batch.Policy{Mode: batch.Substitute, Substitute: func(*transformer.InvalidRecordError) ([]byte, error) { return []byte("7"), nil }}
	res, err := run(t, pol, rec("a", 3, "x", "oops"))
	require.NoError(t, err)
	require.Equal(t, "7", string(res.Outputs[0].Value))

	_, err = run(t, pol, rec("a", 4, "x", "-1"))
	var ie *transformer.InvalidRecordError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, transformer.PartKey, ie.Part)
	require.Equal(t, int64(4), ie.Offset)
	require.Contains(t, err.Error(), "a key is never substituted")
	require.Equal(t, int64(1), pol.Substituted.Load())
}

// wireErr is a codec error that marks its bytes as invalid (as a
// wire-format error of a schema-registry codec does).
var wireErr = fmt.Errorf("no schema: %w: %w", transformer.ErrInvalidRecord, io.ErrUnexpectedEOF)

type failEncode struct{}

func (failEncode) Encode(string) ([]byte, error)   { return nil, wireErr }
func (failEncode) Decode(b []byte) (string, error) { return string(b), nil }

// A codec's error that matches ErrInvalidRecord while encoding an output
// or the state is not an invalid input record: no policy skips or
// dead-letters the input; the batch fails and nothing is produced.
func TestEncodeErrorsAreNeverInvalidRecords(t *testing.T) {
	out := transformer.DeclareOutput("out", transformer.Bytes(), transformer.Codec[string](failEncode{}))
	outputs := map[string]func(*testing.T) stage.Transformer{
		"output (error returned)": func(t *testing.T) stage.Transformer {
			return stageOf(t, transformer.Stateless(func(_ context.Context, r *transformer.Record, o *transformer.Outputs) error {
				return out.Send(o, r.Key, "v")
			}, transformer.Produces(out)))
		},
		"output (error dropped)": func(t *testing.T) stage.Transformer {
			return stageOf(t, transformer.Stateless(func(_ context.Context, r *transformer.Record, o *transformer.Outputs) error {
				_ = out.Send(o, r.Key, "v")
				return nil
			}, transformer.Produces(out)))
		},
		"state": func(t *testing.T) stage.Transformer {
			return stageOf(t, transformer.New(func(_ context.Context, r *transformer.Record, s string, e *transformer.Emitter[string]) error {
				e.SetState("s")
				return nil
			}, transformer.StateCodec(transformer.Codec[string](failEncode{}))))
		},
	}
	for name, mk := range outputs {
		for _, pol := range []*batch.Policy{{Mode: batch.Skip}, {Mode: batch.DeadLetter, DeadLetterTopic: "dlq"}} {
			t.Run(name+"/"+pol.Mode.String(), func(t *testing.T) {
				res, err := batch.Run(context.Background(), batch.Params{
					Transformer: mk(t), Policy: pol, Partition: 2, Sem: make(chan struct{}, 2), Name: "task 2",
					State: func([]byte) ([]byte, bool, error) { return nil, false, nil },
				}, []*kgo.Record{rec("a", 3, "x", "1")})
				require.Error(t, err)
				require.Nil(t, res)
				require.False(t, errors.Is(err, transformer.ErrInvalidRecord), "%v", err)
				require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the codec's other causes stay")
				require.Contains(t, err.Error(), "no schema")
				require.Zero(t, pol.Skipped.Load())
				require.Zero(t, pol.DeadLettered.Load())
			})
		}
	}
}

func stageOf(t *testing.T, tr any) stage.Transformer {
	s, ok := stage.TransformerOf(tr)
	require.True(t, ok)
	return s
}
