package extractor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/flechtwerk/flechtwerk"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/transformer"
)

type fuzzSource struct {
	URL    string            `json:"url"`
	Tables []string          `json:"tables"`
	Limit  int32             `json:"limit"`
	Opts   map[string]string `json:"opts"`
}

type fuzzCursor struct {
	Offset int64   `json:"offset"`
	Token  string  `json:"token"`
	Seen   []int64 `json:"seen"`
	Raw    []byte  `json:"raw"`
}

// panicky is a user decoder that panics on some inputs: the boxing decoder
// must turn the panic into a *flechtwerk.PanicError.
type panicky struct{}

func (panicky) Decode(b []byte) (fuzzSource, error) {
	if bytes.HasPrefix(b, []byte("panic")) {
		panic("decoder panicked on " + string(b))
	}
	return configtopic.JSON[fuzzSource]().Decode(b)
}

// FuzzConfigAndCursor runs arbitrary config record values and cursor bytes
// through the extractor's decode path as the Runner does: the boxing
// config decoder (default JSON, a panicking user decoder), the enrich
// hook, then a poll, which unboxes the config and decodes the cursor. A
// failure is an error naming what failed, never a panic or a zero value.
func FuzzConfigAndCursor(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"null", "null"}, {"{}", "{}"}, {"\xff", "\xff"}, {"panic", "{}"}, {"panic\xff", ""},
		{`{"url":"pg://x","tables":["a","b"],"limit":10,"opts":{"k":"v"}}`, `{"offset":9223372036854775807,"token":"t","seen":[1,2],"raw":"AAE="}`},
		{`{"limit":2147483648}`, `{"offset":9223372036854775808}`}, {`{"tables":[[[]]]}`, `{"seen":[[{}]]}`},
		{`true`, `"TRUE"`}, {` true`, `{"raw":"!"}`}, {`{"url":"\ud800"}`, `{"token":"\xff"}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]), true)
	}
	f.Add([]byte(nil), []byte(nil), false)
	f.Fuzz(func(t *testing.T, value, cursor []byte, found bool) {
		ctx := context.Background()
		rec := configtopic.Record{Topic: "configs", Partition: 1, Offset: 7, Key: []byte("k"), Value: value}
		var polled int
		var gotCfg fuzzSource
		var gotCursor fuzzCursor
		fn := func(_ context.Context, cfg Config[fuzzSource], c fuzzCursor, out *Emitter[fuzzCursor]) error {
			polled++
			gotCfg, gotCursor = cfg.Config, c
			require.Equal(t, found, out.HadCursor())
			return nil
		}
		enrich := func(_ context.Context, _ *configtopic.Record, c fuzzSource) (fuzzSource, error) {
			if c.Limit < 0 {
				return c, errors.New("negative limit")
			}
			if c.URL == "panic" {
				panic("enrich panicked")
			}
			c.Opts = map[string]string{"enriched": "yes"}
			return c, nil
		}
		for _, x := range []*Stage[fuzzSource, fuzzCursor]{
			New(fn),
			New(fn, ConfigCodec[fuzzSource](panicky{}), Enrich(enrich)),
		} {
			require.NoError(t, x.Validate())
			dec := x.decodeConfig()
			v, err := dec.Decode(value)
			var want fuzzSource
			if _, ok := x.config.(panicky); ok && bytes.HasPrefix(value, []byte("panic")) {
				var pe *flechtwerk.PanicError
				require.ErrorAs(t, err, &pe, "a panicking decoder gives a *flechtwerk.PanicError")
				require.Contains(t, pe.Error(), "decoder panicked")
				require.Nil(t, v)
				continue
			}
			var derr error
			if want, derr = configtopic.JSON[fuzzSource]().Decode(value); derr != nil {
				require.Error(t, err)
				require.Equal(t, derr.Error(), err.Error())
				require.Nil(t, v, "a failed decode boxes nothing")
				continue
			}
			require.NoError(t, err)
			if e := x.enrichConfig(); e != nil {
				v, err = e(ctx, &rec, v)
				switch {
				case want.Limit < 0:
					require.ErrorContains(t, err, "negative limit")
					continue
				case want.URL == "panic":
					var pe *flechtwerk.PanicError
					require.ErrorAs(t, err, &pe)
					continue
				}
				require.NoError(t, err)
				want.Opts = map[string]string{"enriched": "yes"}
			}

			polled = 0
			gotCfg, gotCursor = fuzzSource{}, fuzzCursor{}
			err = x.poll(ctx, configtopic.Entry[any]{Record: rec, Config: v}, bytes.Clone(cursor), found, nil)
			if found {
				if wantCursor, cerr := transformer.JSON[fuzzCursor]().Decode(cursor); cerr != nil {
					require.Error(t, err, "cursor %q", cursor)
					require.True(t, strings.HasPrefix(err.Error(), "decoding cursor: "), "error %q", err)
					require.Zero(t, polled, "polled with an undecodable cursor")
					continue
				} else {
					require.NoError(t, err)
					require.Equal(t, wantCursor, gotCursor)
				}
			} else {
				require.NoError(t, err)
				require.Equal(t, fuzzCursor{}, gotCursor)
			}
			require.Equal(t, 1, polled)
			require.True(t, reflect.DeepEqual(want, gotCfg), "polled config %#v, want %#v", gotCfg, want)
		}

		// A config boxed by another extractor (another C) is an error, not
		// a zero value.
		other := New(func(context.Context, Config[string], fuzzCursor, *Emitter[fuzzCursor]) error {
			t.Fatal("polled with a config of another type")
			return nil
		})
		if v, err := New(fn).decodeConfig().Decode(value); err == nil {
			err := other.poll(ctx, configtopic.Entry[any]{Record: rec, Config: v}, cursor, found, nil)
			require.ErrorContains(t, err, "not a decoded string")
		}
	})
}

// FuzzCursorRoundTrip checks Decode(Encode(c)) == c for cursors the fuzzer
// builds, through the default cursor codec.
func FuzzCursorRoundTrip(f *testing.F) {
	f.Add(int64(0), "", int64(0), []byte(nil))
	f.Add(int64(-1<<63), "tok\x00", int64(1<<62), []byte{0xFF})
	f.Fuzz(func(t *testing.T, off int64, tok string, seen int64, raw []byte) {
		c := transformer.JSON[fuzzCursor]()
		in := fuzzCursor{Offset: off, Token: strings.ToValidUTF8(tok, "x"), Seen: []int64{seen}, Raw: raw}
		b, err := c.Encode(in)
		require.NoError(t, err)
		out, err := c.Decode(b)
		require.NoError(t, err)
		if len(in.Raw) == 0 {
			in.Raw = out.Raw
		}
		require.Equal(t, in, out)
	})
}

// FuzzSuspended parses arbitrary headers of a config record: only a
// SuspendedHeader of exactly "true" or "false" is accepted (the last one
// counts); any other value is a *configtopic.RecordError naming the record
// and the bad value. Other headers are ignored.
func FuzzSuspended(f *testing.F) {
	for _, v := range []string{"true", "false", "TRUE", " true", "true ", "True", "1", "", "\xff", "tru\x00e"} {
		f.Add([]byte(v), []byte("other"), "x", true)
	}
	f.Add([]byte(nil), []byte("true"), SuspendedHeader, false)
	f.Add([]byte("false"), []byte("true"), SuspendedHeader, true)
	f.Add([]byte("true"), []byte("TRUE"), SuspendedHeader+" ", true)
	f.Fuzz(func(t *testing.T, v1, v2 []byte, key2 string, twice bool) {
		hs := []configtopic.Header{{Key: SuspendedHeader, Value: v1}}
		if twice {
			hs = append(hs, configtopic.Header{Key: key2, Value: v2})
		}
		rec := configtopic.Record{Topic: "configs", Partition: 2, Offset: 99, Key: []byte("cfg\xff"), Headers: hs}
		got, err := Suspended(rec)

		// The reference: parse each SuspendedHeader in order.
		var want bool
		var bad []byte
		for _, h := range hs {
			if h.Key != SuspendedHeader {
				continue
			}
			switch string(h.Value) {
			case "true":
				want = true
			case "false":
				want = false
			default:
				if bad == nil {
					bad = append([]byte{}, h.Value...)
				}
			}
			if bad != nil {
				break
			}
		}
		if bad != nil {
			var rerr *configtopic.RecordError
			require.ErrorAs(t, err, &rerr)
			require.Equal(t, "configs", rerr.Topic)
			require.Equal(t, int32(2), rerr.Partition)
			require.Equal(t, int64(99), rerr.Offset)
			require.Equal(t, rec.Key, rerr.Key)
			require.Contains(t, err.Error(), SuspendedHeader)
			require.Contains(t, err.Error(), fmt.Sprintf("%q", bad))
			require.False(t, got)
			return
		}
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
}
