package transformer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// process runs st over one input record through the engine's view.
func process(t *testing.T, st any, in *kgo.Record) (stage.Result, error) {
	t.Helper()
	v, ok := stage.TransformerOf(st)
	require.True(t, ok)
	require.NoError(t, v.Validate())
	p, err := v.Prepare(in)
	require.NoError(t, err)
	return v.Process(context.Background(), p, nil, false)
}

func TestOutputTimestampPartitionAndHeaders(t *testing.T) {
	inTS := time.UnixMilli(1_600_000_000_000)
	own := time.UnixMilli(1_700_000_000_000)
	in := &kgo.Record{Topic: "in", Key: []byte("k"), Value: []byte("v"), Timestamp: inTS,
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t1")}, {Key: "tenant", Value: []byte("a")}}}
	h := transformer.Header{Key: "own", Value: []byte("x")}
	tests := []struct {
		name      string
		out       transformer.Output
		inHeaders bool
		partition int32
		ts        time.Time
		headers   []kgo.RecordHeader
	}{
		{"zero value: partitioner, input timestamp, no headers", transformer.Output{Topic: "o"}, false, -1, inTS, nil},
		{"own timestamp", transformer.Output{Topic: "o", Timestamp: own}, false, -1, own, nil},
		{"explicit partition 0", transformer.Output{Topic: "o"}.ToPartition(0), false, 0, inTS, nil},
		{"explicit partition 5", transformer.Output{Topic: "o"}.ToPartition(5), false, 5, inTS, nil},
		{"own headers only", transformer.Output{Topic: "o", Headers: []transformer.Header{h}}, false, -1, inTS,
			[]kgo.RecordHeader{{Key: "own", Value: []byte("x")}}},
		{"input headers first", transformer.Output{Topic: "o", Headers: []transformer.Header{h}}, true, -1, inTS,
			[]kgo.RecordHeader{in.Headers[0], in.Headers[1], {Key: "own", Value: []byte("x")}}},
		{"input headers alone", transformer.Output{Topic: "o"}, true, -1, inTS, in.Headers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []transformer.Opt
			if tc.inHeaders {
				opts = append(opts, transformer.InputHeaders())
			}
			st := transformer.Stateless(func(_ context.Context, _ *transformer.Record, o *transformer.Outputs) error {
				o.SendRecord(tc.out)
				o.SendRecord(tc.out) // two records share allocations; each keeps its own
				return nil
			}, opts...)
			res, err := process(t, st, in)
			require.NoError(t, err)
			require.Len(t, res.Outputs, 2)
			for _, r := range res.Outputs {
				require.Equal(t, tc.partition, r.Partition)
				require.Equal(t, tc.ts, r.Timestamp)
				require.Equal(t, tc.headers, r.Headers)
			}
			if len(tc.headers) > 0 {
				res.Outputs[0].Headers = append(res.Outputs[0].Headers, kgo.RecordHeader{Key: "grown"})
				require.Equal(t, tc.headers, res.Outputs[1].Headers)
			}
		})
	}
}

func TestOutputPartitionAccessors(t *testing.T) {
	var o transformer.Output
	_, ok := o.Partition()
	require.False(t, ok, "the zero value asks the partitioner")
	p, ok := o.ToPartition(3).Partition()
	require.True(t, ok)
	require.Equal(t, int32(3), p)
	_, ok = o.Partition()
	require.False(t, ok, "ToPartition returns a copy")
}

func TestNegativePartitionFailsTheCall(t *testing.T) {
	st := transformer.Stateless(func(_ context.Context, _ *transformer.Record, o *transformer.Outputs) error {
		o.SendRecord(transformer.Output{Topic: "o"}.ToPartition(-2))
		return nil
	})
	_, err := process(t, st, kgoRecord("k", "v"))
	require.ErrorIs(t, err, flechtwerk.ErrOutputPartition)
	require.ErrorContains(t, err, "topic o partition -2")
}

// failCodec fails to encode negative values.
type failCodec struct{}

func (failCodec) Encode(v int) ([]byte, error) {
	if v < 0 {
		return nil, fmt.Errorf("negative %d", v)
	}
	return []byte(strconv.Itoa(v)), nil
}

func (failCodec) Decode(b []byte) (int, error) { return strconv.Atoi(string(b)) }

func TestTypedOutputs(t *testing.T) {
	counts := transformer.DeclareOutput[string, int]("counts", transformer.String(), failCodec{})
	other := transformer.DeclareOutput[string, int]("other", transformer.String(), failCodec{})
	ts := time.UnixMilli(42)
	tests := []struct {
		name     string
		send     func(o *transformer.Outputs) error // returns what the transform returns
		wantErr  error
		contains string
		check    func(t *testing.T, recs []*kgo.Record)
	}{
		{"send", func(o *transformer.Outputs) error { return counts.Send(o, "a", 7) }, nil, "",
			func(t *testing.T, recs []*kgo.Record) {
				require.Len(t, recs, 1)
				require.Equal(t, "counts", recs[0].Topic)
				require.Equal(t, "a", string(recs[0].Key))
				require.Equal(t, "7", string(recs[0].Value))
				require.Equal(t, int32(-1), recs[0].Partition)
			}},
		{"send record", func(o *transformer.Outputs) error {
			return counts.SendRecord(o, transformer.TypedOutput[string, int]{Key: "b", Value: 1, Timestamp: ts,
				Headers: []transformer.Header{{Key: "h", Value: []byte("1")}}}.ToPartition(2))
		}, nil, "", func(t *testing.T, recs []*kgo.Record) {
			require.Len(t, recs, 1)
			require.Equal(t, int32(2), recs[0].Partition)
			require.Equal(t, ts, recs[0].Timestamp)
			require.Equal(t, []kgo.RecordHeader{{Key: "h", Value: []byte("1")}}, recs[0].Headers)
		}},
		{"encode error returned", func(o *transformer.Outputs) error {
			err := counts.Send(o, "a", -1)
			if !errors.Is(err, flechtwerk.ErrOutputEncode) {
				return fmt.Errorf("Send returned %v", err)
			}
			return err
		}, flechtwerk.ErrOutputEncode, "topic counts", nil},
		{"encode error ignored still fails the call", func(o *transformer.Outputs) error {
			_ = counts.Send(o, "a", -1)
			o.Send("raw", nil, nil)
			return nil
		}, flechtwerk.ErrOutputEncode, "negative -1", nil},
		{"encode error wins over the transform's own invalid-record error", func(o *transformer.Outputs) error {
			_ = counts.Send(o, "a", -1)
			return transformer.Invalid(errors.New("rejected"))
		}, flechtwerk.ErrOutputEncode, "negative -1", nil},
		{"undeclared output topic", func(o *transformer.Outputs) error {
			_ = other.Send(o, "a", 1)
			return nil
		}, flechtwerk.ErrInvalidTransformer, "output topic other", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, stateful := range []bool{false, true} {
				var st any
				if stateful {
					st = transformer.New(func(_ context.Context, _ *transformer.Record, _ int, e *transformer.Emitter[int]) error {
						return tc.send(&e.Outputs)
					}, transformer.Produces(counts))
				} else {
					st = transformer.Stateless(func(_ context.Context, _ *transformer.Record, o *transformer.Outputs) error {
						return tc.send(o)
					}, transformer.Produces(counts))
				}
				res, err := process(t, st, kgoRecord("k", "v"))
				if tc.wantErr != nil {
					require.ErrorIs(t, err, tc.wantErr, "stateful %v", stateful)
					require.NotErrorIs(t, err, flechtwerk.ErrInvalidRecord, "never a skippable input")
					require.ErrorContains(t, err, tc.contains)
					continue
				}
				require.NoError(t, err)
				tc.check(t, res.Outputs)
			}
		})
	}
}

// A stage that declares no output (no Produces) cannot send through an
// OutputTopic either: the call fails, whether or not the transform
// returns Send's error, and nothing is sent.
func TestUndeclaredOutputTopicWithoutDeclarations(t *testing.T) {
	counts := transformer.DeclareOutput("counts", transformer.String(), transformer.JSON[int]())
	for _, returned := range []bool{false, true} {
		stateless := transformer.Stateless(func(_ context.Context, _ *transformer.Record, o *transformer.Outputs) error {
			err := counts.Send(o, "a", 1)
			if returned {
				return err
			}
			return nil
		})
		stateful := transformer.New(func(_ context.Context, _ *transformer.Record, _ int, e *transformer.Emitter[int]) error {
			err := counts.SendRecord(e, transformer.TypedOutput[string, int]{Key: "a", Value: 1})
			if returned {
				return err
			}
			return nil
		})
		for _, st := range []any{stateless, stateful} {
			res, err := process(t, st, kgoRecord("k", "v"))
			require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer, "returned %v", returned)
			require.ErrorContains(t, err, "output topic counts")
			require.Empty(t, res.Outputs)
		}
	}
}

// A typed output can be sent through an *Emitter directly.
func TestTypedOutputThroughEmitter(t *testing.T) {
	counts := transformer.DeclareOutput("counts", transformer.String(), transformer.JSON[int]())
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		return counts.Send(e, string(rec.Key), n+1)
	}, transformer.Produces(counts))
	res, err := process(t, st, kgoRecord("k", "v"))
	require.NoError(t, err)
	require.Len(t, res.Outputs, 1)
	k, v, err := counts.Decode(transformer.Output{Key: res.Outputs[0].Key, Value: res.Outputs[0].Value})
	require.NoError(t, err)
	require.Equal(t, "k", k)
	require.Equal(t, 1, v)
}

func TestOutputDeclarationProblems(t *testing.T) {
	ok := transformer.DeclareOutput("ok", transformer.Bytes(), transformer.Bytes())
	tests := []struct {
		name   string
		opts   []transformer.Opt
		want   error
		fields []string
	}{
		{"empty topic", []transformer.Opt{transformer.Produces(transformer.DeclareOutput("", transformer.Bytes(), transformer.Bytes()))},
			flechtwerk.ErrInvalidOption, []string{"DeclareOutput"}},
		{"nil codecs", []transformer.Opt{transformer.Produces(transformer.DeclareOutput[[]byte, []byte]("t", nil, nil))},
			flechtwerk.ErrInvalidOption, []string{"output topic t", "output topic t"}},
		{"no partitions", []transformer.Opt{transformer.Produces(transformer.DeclareOutput("t", transformer.Bytes(), transformer.Bytes(),
			transformer.CreateTopic(0, nil)))}, flechtwerk.ErrInvalidOption, []string{"output topic t"}},
		{"declared twice", []transformer.Opt{transformer.Produces(ok, transformer.DeclareOutput("ok", transformer.Bytes(), transformer.Bytes()))},
			flechtwerk.ErrDuplicateTopic, []string{"output topic ok"}},
		{"two partitioners", []transformer.Opt{
			transformer.Produces(transformer.DeclareOutput("p", transformer.Bytes(), transformer.Bytes(), transformer.PartitionBy(transformer.Murmur2))),
			transformer.Partitioner("p", transformer.Murmur2)}, flechtwerk.ErrInvalidOption, []string{"output topic p"}},
		{"nil partitioner", []transformer.Opt{transformer.Partitioner("p", nil)}, flechtwerk.ErrInvalidOption, []string{"Partitioner"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, st := range []interface{ Validate() error }{
				transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil }, tc.opts...),
				transformer.New(func(context.Context, *transformer.Record, int, *transformer.Emitter[int]) error { return nil }, tc.opts...),
			} {
				err := st.Validate()
				require.ErrorIs(t, err, tc.want)
				var fields []string
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					for _, ce := range flatten(e) {
						fields = append(fields, ce.Field)
					}
				}
				require.Equal(t, tc.fields, fields)
			}
		})
	}
}

// flatten returns the *flechtwerk.ConfigError values of err, a tree of
// joined errors.
func flatten(err error) []*flechtwerk.ConfigError {
	if ce, ok := err.(*flechtwerk.ConfigError); ok {
		return []*flechtwerk.ConfigError{ce}
	}
	var out []*flechtwerk.ConfigError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
	}
	return out
}

// Murmur2 partitions exactly like franz-go's Kafka-compatible default
// (itself checked against Kafka's DefaultPartitioner).
// A nil key hashes like an empty one (what Murmur2's doc says).
func TestMurmur2NilKey(t *testing.T) {
	for _, n := range []int32{1, 3, 7, 64} {
		require.Equal(t, transformer.Murmur2([]byte{}, n), transformer.Murmur2(nil, n))
	}
	require.NotZero(t, transformer.Murmur2(nil, 64), "not 0, as the doc said before")
}

func TestMurmur2MatchesKafka(t *testing.T) {
	kafka := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := range 2000 {
		key := []byte(strconv.Itoa(i * 7919))[:1+i%6]
		if i%5 == 0 {
			key = fmt.Appendf(nil, "key-%d-%s", i, "xyz"[:i%4])
		}
		for _, n := range []int32{1, 2, 3, 7, 12, 100} {
			require.Equal(t, int32(kafka.Partition(&kgo.Record{Key: key}, int(n))), transformer.Murmur2(key, n), "key %q n %d", key, n)
		}
	}
	require.Equal(t, int32(kafka.Partition(&kgo.Record{Key: []byte{}}, 1000)), transformer.Murmur2([]byte{}, 1000), "empty key")
}

// lifeCodec is a codec with a Lifecycle.
type lifeCodec struct{ name string }

func (*lifeCodec) Encode(b []byte) ([]byte, error) { return b, nil }
func (*lifeCodec) Decode(b []byte) ([]byte, error) { return b, nil }
func (*lifeCodec) Open(context.Context) error      { return nil }
func (*lifeCodec) Close(context.Context) error     { return nil }

// The stage's view lists every codec it holds once: state, input and the
// declared outputs' keys and values.
func TestStageCodecs(t *testing.T) {
	state, input, key, value := &lifeCodec{"state"}, &lifeCodec{"input"}, &lifeCodec{"key"}, &lifeCodec{"value"}
	a := transformer.DeclareOutput[[]byte, []byte]("a", key, value)
	b := transformer.DeclareOutput[[]byte, []byte]("b", key, key) // the same codec twice: listed once
	st := transformer.NewTyped(func(context.Context, *transformer.TypedRecord[[]byte], []byte, *transformer.Emitter[[]byte]) error {
		return nil
	},
		transformer.StateCodec[[]byte](state), transformer.InputCodec[[]byte](input), transformer.Produces(a, b))
	v, ok := stage.ViewOf(st)
	require.True(t, ok)
	o, ok := v.(stage.Outputs)
	require.True(t, ok)
	require.Equal(t, []any{state, key, value}, o.Codecs(), "not the input codec, which only decodes")
	require.Equal(t, []stage.OutputSpec{{Topic: "a"}, {Topic: "b"}}, o.Outputs())

	sl := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil },
		transformer.Produces(a))
	v, _ = stage.ViewOf(sl)
	require.Equal(t, []any{key, value}, v.(stage.Outputs).Codecs(), "a stateless stage has no state codec")
}
