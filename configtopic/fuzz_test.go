package configtopic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzConfig is a config type with the shapes config records have.
type fuzzConfig struct {
	URL      string            `json:"url"`
	Interval int64             `json:"interval"`
	Enabled  bool              `json:"enabled"`
	Limits   []int32           `json:"limits"`
	Labels   map[string]string `json:"labels"`
	Auth     *struct {
		User   string `json:"user"`
		Secret []byte `json:"secret"`
	} `json:"auth"`
	Extra map[string]any `json:"extra"`
}

func newFuzzTable[C any](t *testing.T, opts ...Opt) *Table[C] {
	tb, err := New[C](append([]Opt{SeedBrokers("127.0.0.1:1"), Topics("configs")}, opts...)...)
	require.NoError(t, err)
	return tb
}

// FuzzDecodeConfig feeds arbitrary config record values through a Table's
// decode path (decoder, then enrich hook): the default JSON decoder for a
// struct and for any, and the raw decoder. A failure is an error naming the
// step; a decoded config survives a JSON round trip; the RecordError that
// Run returns for it formats without panicking whatever the key.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		"", "null", "{}", "[]", "\xff", `"\xff"`, "1e400", "-9223372036854775809",
		`{"url":"http://x","interval":60,"enabled":true,"limits":[1,2],"labels":{"a":"b"},"auth":{"user":"u","secret":"c2VjcmV0"}}`,
		`{"interval":1e400}`, `{"limits":[2147483648]}`, `{"auth":{"secret":"!"}}`,
		`{"extra":{"a":{"b":{"c":[[[[{}]]]]}}}}`, `{"enabled":"true"}`, `true`, `"TRUE"`, ` true`,
		`{"url":"x"} trailing`, `{"url":"\ud800"}`,
	} {
		f.Add([]byte(s), []byte("key"))
	}
	f.Add([]byte(nil), []byte(nil))
	f.Add([]byte("{}"), []byte("\xff\x00"))
	f.Fuzz(func(t *testing.T, value, key []byte) {
		ctx := context.Background()
		rec := &Record{Topic: "configs", Partition: 3, Offset: 42, Key: key, Value: bytes.Clone(value)}

		structTable := newFuzzTable[fuzzConfig](t)
		c, err := structTable.decode(ctx, rec)
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "decoding: "), "error %q does not name the step", err)
			rerr := &RecordError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Err: err}
			msg := rerr.Error()
			require.Contains(t, msg, "topic configs partition 3 offset 42")
			require.Contains(t, msg, fmt.Sprintf("%q", key))
			require.True(t, errors.Is(rerr, err))
		} else {
			roundTrip(t, c)
			// The config shares no memory with the record value.
			before := fmt.Sprintf("%#v", c)
			for i := range rec.Value {
				rec.Value[i] ^= 0xFF
			}
			require.Equal(t, before, fmt.Sprintf("%#v", c), "the config changed with its record's value")
			copy(rec.Value, value)
		}

		anyTable := newFuzzTable[any](t)
		if v, err := anyTable.decode(ctx, rec); err == nil {
			roundTrip(t, v)
		} else {
			require.True(t, strings.HasPrefix(err.Error(), "decoding: "), "error %q does not name the step", err)
		}

		rawTable := newFuzzTable[[]byte](t, Codec(Bytes()))
		raw, err := rawTable.decode(ctx, rec)
		require.NoError(t, err)
		require.True(t, bytes.Equal(value, raw))

		// An enrich hook's error is named as such.
		hookErr := errors.New("secret not found")
		enriched := newFuzzTable[[]byte](t, Codec(Bytes()), Enrich(func(_ context.Context, r *Record, c []byte) ([]byte, error) {
			if len(c) > 0 && c[0]%2 == 1 {
				return nil, hookErr
			}
			return append(bytes.Clone(c), r.Key...), nil
		}))
		got, err := enriched.decode(ctx, rec)
		if len(value) > 0 && value[0]%2 == 1 {
			require.ErrorIs(t, err, hookErr)
			require.True(t, strings.HasPrefix(err.Error(), "enriching: "), "error %q does not name the step", err)
		} else {
			require.NoError(t, err)
			require.True(t, bytes.Equal(append(bytes.Clone(value), key...), got))
		}
	})
}

// roundTrip checks JSON[C] decodes the JSON encoding of v back to v.
func roundTrip[C any](t *testing.T, v C) {
	b, err := jsonMarshal(v)
	require.NoError(t, err, "encoding a decoded %T", v)
	v2, err := JSON[C]().Decode(b)
	require.NoError(t, err, "decoding %q", b)
	require.True(t, reflect.DeepEqual(v, v2), "Decode(Encode(v)) = %#v, v = %#v", v2, v)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
