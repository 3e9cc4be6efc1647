package transformer

import (
	"bytes"
	"context"
	"math"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// fuzzState is a state type with the shapes user states have: numbers,
// text, raw bytes, a map, nesting and an optional part. Tags has no
// omitempty: encoding/json would drop an empty map, which then decodes as
// nil, and Decode(Encode(v)) would differ from v through the type's own
// tags, not the codec (testdata: {"tAgs":{}}).
type fuzzState struct {
	N     int64             `json:"n"`
	F     float64           `json:"f"`
	S     string            `json:"s"`
	B     []byte            `json:"b"`
	OK    bool              `json:"ok"`
	Tags  map[string]string `json:"tags"`
	Inner *fuzzState        `json:"inner,omitempty"`
}

// checkDecode decodes b with the JSON codec of T and checks the codec's
// contract: an error has a message; a decoded value survives a round trip;
// it shares no memory with b.
func checkDecode[T any](t *testing.T, b []byte) {
	c := JSON[T]()
	in := bytes.Clone(b)
	v, err := c.Decode(in)
	if err != nil {
		require.NotEmpty(t, err.Error(), "decode error of %T without a message", v)
		return
	}
	enc, err := c.Encode(v)
	require.NoError(t, err, "encoding a decoded %T", v)
	v2, err := c.Decode(enc)
	require.NoError(t, err, "decoding the encoding %q of a decoded %T", enc, v)
	require.True(t, reflect.DeepEqual(v, v2), "%T: Decode(Encode(v)) = %#v, v = %#v", v, v2, v)
	// The decoded value must not share memory with its input.
	for i := range in {
		in[i] ^= 0xFF
	}
	enc2, err := c.Encode(v)
	require.NoError(t, err)
	require.Equal(t, enc, enc2, "%T: the decoded value changed with its input bytes", v)
}

// FuzzJSONDecode feeds arbitrary bytes (a state or cursor read back from a
// changelog) to the JSON codec of several state types.
func FuzzJSONDecode(f *testing.F) {
	for _, s := range []string{
		"", "null", "0", "-0", "1e400", "-9223372036854775809", "18446744073709551616",
		`"\xff\xfe"`, "\xff", `{"n":1,"s":"x","b":"AAE=","inner":{"inner":{"n":2}}}`,
		`[[[[[[[[[[]]]]]]]]]]`, `{"tags":{"a":"b"}}`, `{"b":"not base64"}`, `{"n":1.5}`,
		`true`, `"TRUE"`, ` true`, `{"n":1}{"n":2}`, `{"f":1e308}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode[int64](t, b)
		checkDecode[string](t, b)
		checkDecode[[]byte](t, b)
		checkDecode[fuzzState](t, b)
		checkDecode[*fuzzState](t, b)
		checkDecode[map[string]any](t, b)
		checkDecode[[]int](t, b)
	})
}

// FuzzJSONRoundTrip checks Decode(Encode(v)) == v for states the fuzzer
// builds, and that an unencodable state (NaN, ±Inf) is an error.
func FuzzJSONRoundTrip(f *testing.F) {
	f.Add(int64(0), 0.0, "", []byte(nil), false, "", "")
	f.Add(int64(math.MaxInt64), math.MaxFloat64, "\xff\xfe", []byte{0, 1, 2}, true, "k", "\x00")
	f.Add(int64(math.MinInt64), math.SmallestNonzeroFloat64, "日本", []byte{}, true, "", "v")
	f.Add(int64(-1), math.Inf(1), "x", []byte("y"), false, "a", "b")
	f.Add(int64(1), math.NaN(), `"\u2028</script>`, []byte("y"), false, "\u2028", "b")
	f.Fuzz(func(t *testing.T, n int64, fl float64, s string, b []byte, ok bool, tk, tv string) {
		v := fuzzState{N: n, F: fl, S: s, B: b, OK: ok, Tags: map[string]string{tk: tv}, Inner: &fuzzState{S: tv}}
		c := JSON[fuzzState]()
		enc, err := c.Encode(v)
		if math.IsNaN(fl) || math.IsInf(fl, 0) {
			require.Error(t, err, "encoding a state with float %v", fl)
			require.NotEmpty(t, err.Error())
			return
		}
		require.NoError(t, err)
		got, err := c.Decode(enc)
		require.NoError(t, err, "decoding %q", enc)
		if !utf8.ValidString(s) || !utf8.ValidString(tk) || !utf8.ValidString(tv) {
			// encoding/json replaces invalid UTF-8 with U+FFFD: the
			// state comes back valid and stays stable from then on.
			require.True(t, utf8.ValidString(got.S+got.Inner.S), "decoded strings are valid UTF-8")
			enc2, err := c.Encode(got)
			require.NoError(t, err)
			got2, err := c.Decode(enc2)
			require.NoError(t, err)
			require.Equal(t, got, got2)
			return
		}
		if len(v.B) == 0 {
			v.B = got.B // nil and empty both encode as "" (or null)
		}
		require.Equal(t, v, got)
	})
}

// FuzzBytesCodec checks the raw codec: the identity, on a copy.
func FuzzBytesCodec(f *testing.F) {
	f.Add([]byte(nil))
	f.Add([]byte{})
	f.Add([]byte("\xff\x00state"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := Bytes()
		in := bytes.Clone(b)
		v, err := c.Decode(in)
		require.NoError(t, err)
		require.True(t, bytes.Equal(b, v), "Decode(%q) = %q", b, v)
		enc, err := c.Encode(v)
		require.NoError(t, err)
		require.True(t, bytes.Equal(b, enc), "Encode(Decode(%q)) = %q", b, enc)
		for i := range in {
			in[i] ^= 0xFF
		}
		require.True(t, bytes.Equal(b, v), "the decoded state changed with its input bytes")
	})
}

// fuzzHeaders turns b into record headers: per header a key length byte,
// the key, a value length byte (0xFF: a nil value) and the value.
func fuzzHeaders(b []byte) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	take := func(n int) []byte {
		n = min(n, len(b))
		out := b[:n]
		b = b[n:]
		return out
	}
	for len(b) > 0 {
		k := take(int(take(1)[0] % 24))
		h := kgo.RecordHeader{Key: string(k)}
		if len(b) > 0 {
			n := take(1)[0]
			if n != 0xFF {
				h.Value = bytes.Clone(take(int(n % 64)))
			}
		}
		hs = append(hs, h)
	}
	return hs
}

// FuzzPrepare converts arbitrary Kafka records to the user's Record (with
// the default state key and a StateKey function reading a header), then
// runs a stateful transform on arbitrary stored state bytes.
func FuzzPrepare(f *testing.F) {
	f.Add("in", int32(0), int64(0), []byte(nil), []byte(nil), []byte(nil), int64(0), []byte(nil))
	f.Add("", int32(-1), int64(-1), []byte{}, []byte{}, []byte{3, 'k', 'e', 'y', 0xFF}, int64(math.MinInt64), []byte("{}"))
	f.Add("t\xff", int32(math.MaxInt32), int64(math.MaxInt64), []byte("\xff\xfe"), []byte("v"),
		[]byte{2, 's', 'k', 4, 't', 'r', 'u', 'e', 0, 0}, int64(math.MaxInt64), []byte(`{"n":1e400}`))
	f.Add("in", int32(3), int64(7), []byte("k"), []byte("v"), []byte{2, 's', 'k', 0}, int64(1), []byte(`{"n":-1,"inner":{"inner":{}}}`))
	f.Add("in", int32(3), int64(7), []byte("k"), []byte("v"), []byte{2, 's', 'k', 1, 0xff}, int64(1), []byte("\xff"))
	f.Fuzz(func(t *testing.T, topic string, partition int32, offset int64, key, value, hdrs []byte, ts int64, state []byte) {
		r := &kgo.Record{
			Topic: topic, Partition: partition, Offset: offset,
			Key: key, Value: value, Headers: fuzzHeaders(hdrs), Timestamp: time.Unix(0, ts),
		}
		var sawCalls int
		fn := func(_ context.Context, rec *Record, s fuzzState, out *Emitter[fuzzState]) error {
			sawCalls++
			s.N++
			out.SetState(s)
			out.SendRecord(Output{Topic: "out", Key: rec.Key, Value: rec.Value, Headers: rec.Headers})
			return nil
		}
		byHeader := func(rec *Record) []byte {
			var k []byte
			for _, h := range rec.Headers {
				if h.Key == "sk" {
					k = h.Value
				}
			}
			return k
		}
		for _, tr := range []*Stage[fuzzState]{New(fn), New(fn, StateKey(byHeader))} {
			a := adapter[fuzzState]{tr}
			in, err := a.Prepare(r)
			require.NoError(t, err)
			require.Same(t, r, in.Record)
			rec, ok := in.View.(*Record)
			require.True(t, ok, "view is %T", in.View)
			require.Equal(t, r.Topic, rec.Topic)
			require.Equal(t, r.Partition, rec.Partition)
			require.Equal(t, r.Offset, rec.Offset)
			require.Equal(t, r.Key, rec.Key)
			require.Equal(t, r.Value, rec.Value)
			require.True(t, r.Timestamp.Equal(rec.Timestamp))
			require.Len(t, rec.Headers, len(r.Headers))
			for i, h := range r.Headers {
				require.Equal(t, h.Key, rec.Headers[i].Key)
				require.Equal(t, h.Value, rec.Headers[i].Value)
			}
			if tr.stateKey == nil {
				require.Equal(t, r.Key, in.Key)
			} else {
				require.Equal(t, byHeader(rec), in.Key)
			}

			for _, found := range []bool{false, true} {
				sawCalls = 0
				res, err := a.Process(context.Background(), in, bytes.Clone(state), found)
				if found {
					if _, derr := JSON[fuzzState]().Decode(state); derr != nil {
						require.Error(t, err, "state %q", state)
						require.Contains(t, err.Error(), "transformer: decoding state of key")
						require.Zero(t, sawCalls, "the transform ran on undecodable state")
						continue
					}
				}
				if err != nil {
					// A state that decodes but cannot be encoded
					// again (e.g. a float that overflows) is an
					// error naming the key.
					require.Contains(t, err.Error(), "transformer: encoding state of key")
					continue
				}
				require.Equal(t, stage.Put, res.Op)
				require.NotNil(t, res.State)
				got, err := JSON[fuzzState]().Decode(res.State)
				require.NoError(t, err, "the written state %q does not decode", res.State)
				if !found {
					require.Equal(t, int64(1), got.N)
				}
				require.Len(t, res.Outputs, 1)
				o := res.Outputs[0]
				require.Equal(t, "out", o.Topic)
				require.Equal(t, int32(-1), o.Partition)
				require.Equal(t, r.Key, o.Key)
				require.Equal(t, r.Value, o.Value)
				require.Equal(t, len(r.Headers), len(o.Headers))
			}
		}
	})
}
