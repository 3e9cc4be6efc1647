package schemaregistry_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/schemaregistry"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Every codec is a transformer.Codec and a flechtwerk.Lifecycle.
var (
	_ transformer.Codec[order]                   = (*schemaregistry.Codec[order])(nil)
	_ flechtwerk.Lifecycle                       = (*schemaregistry.Codec[order])(nil)
	_ transformer.Codec[*wrapperspb.StringValue] = (*schemaregistry.Codec[*wrapperspb.StringValue])(nil)
)

type order struct {
	ID     string `avro:"id" json:"id"`
	Amount int64  `avro:"amount" json:"amount"`
}

const orderAvro = `{"type":"record","name":"Order","namespace":"flechtwerk.test","fields":[
 {"name":"id","type":"string"},{"name":"amount","type":"long"}]}`

// orderAvroV2 adds a field with a default: BACKWARD compatible with orderAvro.
const orderAvroV2 = `{"type":"record","name":"Order","namespace":"flechtwerk.test","fields":[
 {"name":"id","type":"string"},{"name":"amount","type":"long"},
 {"name":"currency","type":"string","default":"EUR"}]}`

// orderAvroBroken changes the type of amount: incompatible with orderAvro.
const orderAvroBroken = `{"type":"record","name":"Order","namespace":"flechtwerk.test","fields":[
 {"name":"id","type":"string"},{"name":"amount","type":"string"}]}`

const orderJSON = `{"type":"object","properties":{"id":{"type":"string"},"amount":{"type":"integer","minimum":0}},
 "required":["id","amount"]}`

func wrappersProto(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/wrappers.proto")
	require.NoError(t, err)
	return string(b)
}

// registry is a schema registry under test.
type registry struct {
	name string
	cl   *sr.Client
	fake *srfake.Registry // nil for a real registry
}

// registries returns the in-process fake and, when SCHEMA_REGISTRY_URL is
// set, the real registry it names.
func registries(t *testing.T) []registry {
	t.Helper()
	fake := srfake.New()
	t.Cleanup(fake.Close)
	cl, err := sr.NewClient(sr.URLs(fake.URL()))
	require.NoError(t, err)
	regs := []registry{{name: "fake", cl: cl, fake: fake}}
	if u := os.Getenv("SCHEMA_REGISTRY_URL"); u != "" {
		cl, err := sr.NewClient(sr.URLs(u))
		require.NoError(t, err)
		regs = append(regs, registry{name: "real", cl: cl})
	} else {
		t.Log("SCHEMA_REGISTRY_URL unset: the fake registry only; a real one: make test-schemaregistry")
	}
	return regs
}

// topic is a topic name no earlier run used (a real registry keeps its
// subjects between tests of one run).
func topic(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano())
}

func open[T any](t *testing.T, c *schemaregistry.Codec[T], err error) {
	t.Helper()
	require.NoError(t, err)
	require.NoError(t, c.Open(context.Background()))
	t.Cleanup(func() { require.NoError(t, c.Close(context.Background())) })
}

// header checks the Confluent header of b and returns the payload after
// it (and after the Protobuf message index, when want is not nil).
func header(t *testing.T, b []byte, id int, index []int) []byte {
	t.Helper()
	require.GreaterOrEqual(t, len(b), 5)
	require.Equal(t, byte(0), b[0], "magic byte")
	require.Equal(t, uint32(id), binary.BigEndian.Uint32(b[1:5]), "schema id")
	b = b[5:]
	if index == nil {
		return b
	}
	if len(index) == 1 && index[0] == 0 {
		require.Equal(t, byte(0), b[0], "first-message shortcut")
		return b[1:]
	}
	n, l := binary.Varint(b)
	require.Equal(t, int64(len(index)), n)
	b = b[l:]
	for _, want := range index {
		got, l := binary.Varint(b)
		require.Equal(t, int64(want), got)
		b = b[l:]
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, reg := range registries(t) {
		t.Run(reg.name, func(t *testing.T) {
			t.Run("avro", func(t *testing.T) {
				c, err := schemaregistry.Avro[order](reg.cl, topic(t), orderAvro)
				open(t, c, err)
				in := order{ID: "o-1", Amount: 42}
				b, err := c.Encode(in)
				require.NoError(t, err)
				want, err := avro.Marshal(avro.MustParse(orderAvro), in)
				require.NoError(t, err)
				require.Equal(t, want, header(t, b, c.ID(), nil))
				out, err := c.Decode(b)
				require.NoError(t, err)
				require.Equal(t, in, out)
			})
			t.Run("json", func(t *testing.T) {
				c, err := schemaregistry.JSONSchema[order](reg.cl, topic(t), orderJSON)
				open(t, c, err)
				in := order{ID: "o-1", Amount: 42}
				b, err := c.Encode(in)
				require.NoError(t, err)
				require.JSONEq(t, `{"id":"o-1","amount":42}`, string(header(t, b, c.ID(), nil)))
				out, err := c.Decode(b)
				require.NoError(t, err)
				require.Equal(t, in, out)
			})
			t.Run("protobuf", func(t *testing.T) {
				c, err := schemaregistry.Protobuf[*wrapperspb.StringValue](reg.cl, topic(t), wrappersProto(t))
				open(t, c, err)
				in := wrapperspb.String("hello")
				b, err := c.Encode(in)
				require.NoError(t, err)
				want, err := proto.Marshal(in)
				require.NoError(t, err)
				// StringValue is the eighth message of wrappers.proto.
				require.Equal(t, want, header(t, b, c.ID(), []int{7}))
				out, err := c.Decode(b)
				require.NoError(t, err)
				require.True(t, proto.Equal(in, out))
			})
		})
	}
}

// The codec's bytes decode with franz-go's sr.Serde, and the Serde's with
// the codec.
func TestInteropWithSerde(t *testing.T) {
	for _, reg := range registries(t) {
		t.Run(reg.name, func(t *testing.T) {
			t.Run("avro", func(t *testing.T) {
				c, err := schemaregistry.Avro[order](reg.cl, topic(t), orderAvro)
				open(t, c, err)
				s := avro.MustParse(orderAvro)
				var serde sr.Serde
				serde.Register(c.ID(), order{},
					sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(s, v) }),
					sr.DecodeFn(func(b []byte, v any) error { return avro.Unmarshal(s, b, v) }))
				interop(t, c, &serde, order{ID: "o-2", Amount: 7}, order{ID: "o-3", Amount: 8})
			})
			t.Run("json", func(t *testing.T) {
				c, err := schemaregistry.JSONSchema[order](reg.cl, topic(t), orderJSON)
				open(t, c, err)
				var serde sr.Serde
				serde.Register(c.ID(), order{}, sr.EncodeFn(json.Marshal), sr.DecodeFn(json.Unmarshal))
				interop(t, c, &serde, order{ID: "o-2", Amount: 7}, order{ID: "o-3", Amount: 8})
			})
			t.Run("protobuf", func(t *testing.T) {
				c, err := schemaregistry.Protobuf[*wrapperspb.StringValue](reg.cl, topic(t), wrappersProto(t))
				open(t, c, err)
				var serde sr.Serde
				serde.Register(c.ID(), &wrapperspb.StringValue{},
					sr.EncodeFn(func(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }),
					sr.DecodeFn(func(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }),
					sr.Index(7))
				b, err := c.Encode(wrapperspb.String("to serde"))
				require.NoError(t, err)
				var got wrapperspb.StringValue
				require.NoError(t, serde.Decode(b, &got))
				require.Equal(t, "to serde", got.GetValue())
				b, err = serde.Encode(wrapperspb.String("from serde"))
				require.NoError(t, err)
				out, err := c.Decode(b)
				require.NoError(t, err)
				require.Equal(t, "from serde", out.GetValue())
			})
		})
	}
}

func interop(t *testing.T, c *schemaregistry.Codec[order], serde *sr.Serde, toSerde, fromSerde order) {
	t.Helper()
	b, err := c.Encode(toSerde)
	require.NoError(t, err)
	var got order
	require.NoError(t, serde.Decode(b, &got))
	require.Equal(t, toSerde, got)
	b, err = serde.Encode(fromSerde)
	require.NoError(t, err)
	out, err := c.Decode(b)
	require.NoError(t, err)
	require.Equal(t, fromSerde, out)
}

// Open fails with SCHEMA_REFUSED naming the subject when the registry
// refuses an incompatible schema.
func TestOpenIncompatibleSchemaNamesSubject(t *testing.T) {
	for _, reg := range registries(t) {
		t.Run(reg.name, func(t *testing.T) {
			tp := topic(t)
			subject := tp + "-value"
			if reg.fake != nil {
				// The fake does not check compatibility: answer like
				// Confluent's registry does for an incompatible schema.
				reg.fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
					if r.Method != http.MethodPost || r.URL.Path != "/subjects/"+subject+"/versions" {
						return false
					}
					body, err := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(body))
					var s sr.Schema
					if err != nil || json.Unmarshal(body, &s) != nil || !strings.Contains(s.Schema, `"amount","type":"string"`) {
						return false
					}
					w.WriteHeader(http.StatusConflict)
					_, _ = w.Write([]byte(`{"error_code":409,"message":"Schema being registered is incompatible with an earlier schema"}`))
					return true
				})
			} else {
				_ = reg.cl.SetCompatibility(context.Background(), sr.SetCompatibility{Level: sr.CompatBackward}, subject)
			}
			v1, err := schemaregistry.Avro[order](reg.cl, tp, orderAvro)
			open(t, v1, err)
			if reg.fake == nil {
				res := reg.cl.SetCompatibility(context.Background(), sr.SetCompatibility{Level: sr.CompatBackward}, subject)
				require.NoError(t, res[0].Err)
			}
			broken, err := schemaregistry.Avro[order](reg.cl, tp, orderAvroBroken)
			require.NoError(t, err)
			err = broken.Open(context.Background())
			require.ErrorIs(t, err, flechtwerk.ErrSchemaRefused)
			require.NotErrorIs(t, err, flechtwerk.ErrSchemaRegistryUnavailable)
			require.ErrorContains(t, err, "subject "+subject)
			var re *sr.ResponseError
			require.ErrorAs(t, err, &re)
			require.Equal(t, http.StatusConflict, re.StatusCode)
			_, err = broken.Encode(order{ID: "x"})
			require.ErrorIs(t, err, schemaregistry.ErrNotOpen)

			// A compatible evolution registers.
			v2, err := schemaregistry.Avro[order](reg.cl, tp, orderAvroV2)
			open(t, v2, err)
			require.NotEqual(t, v1.ID(), v2.ID())
		})
	}
}

func TestOpenUnreachableRegistry(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	cl, err := sr.NewClient(sr.URLs(url))
	require.NoError(t, err)
	c, err := schemaregistry.Avro[order](cl, "orders", orderAvro)
	require.NoError(t, err)
	err = c.Open(context.Background())
	require.ErrorIs(t, err, flechtwerk.ErrSchemaRegistryUnavailable)
	require.ErrorContains(t, err, "subject orders-value")
}

func TestLookupOnlyRefusesUnregistered(t *testing.T) {
	for _, reg := range registries(t) {
		t.Run(reg.name, func(t *testing.T) {
			tp := topic(t)
			c, err := schemaregistry.Avro[order](reg.cl, tp, orderAvro, schemaregistry.AutoRegister(false), schemaregistry.Key())
			require.NoError(t, err)
			require.Equal(t, tp+"-key", c.Subject())
			err = c.Open(context.Background())
			require.ErrorIs(t, err, flechtwerk.ErrSchemaRefused)
			require.ErrorContains(t, err, "subject "+tp+"-key")

			registering, err := schemaregistry.Avro[order](reg.cl, tp, orderAvro, schemaregistry.Key())
			open(t, registering, err)
			require.NoError(t, c.Open(context.Background()))
			require.Equal(t, registering.ID(), c.ID())
		})
	}
}

func TestEncodeBeforeOpen(t *testing.T) {
	reg := registries(t)[0]
	c, err := schemaregistry.Avro[order](reg.cl, "orders", orderAvro)
	require.NoError(t, err)
	_, err = c.Encode(order{ID: "x"})
	require.ErrorIs(t, err, schemaregistry.ErrNotOpen)
	require.ErrorContains(t, err, "orders-value")
	require.NoError(t, c.Open(context.Background()))
	_, err = c.Encode(order{ID: "x"})
	require.NoError(t, err)
	require.NoError(t, c.Close(context.Background()))
	require.NoError(t, c.Close(context.Background()))
	_, err = c.Encode(order{ID: "x"})
	require.ErrorIs(t, err, schemaregistry.ErrNotOpen)
}

func TestConstructorErrors(t *testing.T) {
	reg := registries(t)[0]
	_, err := schemaregistry.Avro[order](reg.cl, "orders", `{"type":"record"`)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	_, err = schemaregistry.JSONSchema[order](reg.cl, "orders", `{"type":"nope"}`)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	_, err = schemaregistry.Protobuf[*wrapperspb.StringValue](reg.cl, "orders", `syntax = "proto3"; message Other {}`)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	_, err = schemaregistry.Avro[order](nil, "", orderAvro)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	require.ErrorContains(t, err, "client")
	require.ErrorContains(t, err, "topic")
}

func TestDecodeRejectsForeignBytes(t *testing.T) {
	for _, reg := range registries(t) {
		t.Run(reg.name, func(t *testing.T) {
			c, err := schemaregistry.Avro[order](reg.cl, topic(t), orderAvro)
			open(t, c, err)
			j, err := schemaregistry.JSONSchema[order](reg.cl, topic(t), orderJSON)
			open(t, j, err)
			jsonBytes, err := j.Encode(order{ID: "j", Amount: 1})
			require.NoError(t, err)
			good, err := c.Encode(order{ID: "a", Amount: 1})
			require.NoError(t, err)
			unknownID := append([]byte{0, 0x7f, 0xff, 0xff, 0xf0}, good[5:]...)
			truncated := good[:len(good)-1]

			for _, tc := range []struct {
				name string
				in   []byte
				msg  string
			}{
				{"plain JSON", []byte(`{"id":"a","amount":1}`), "no Confluent header"},
				{"magic byte 1", append([]byte{1}, good[1:]...), "no Confluent header"},
				{"short", []byte{0, 0, 1}, "no Confluent header"},
				{"tombstone", nil, "empty value"},
				{"unknown schema id", unknownID, "schema id 2147483632 is not in the registry"},
				{"schema of another type", jsonBytes, "is a JSON schema, not AVRO"},
				{"truncated payload", truncated, fmt.Sprintf("schema id %d", c.ID())},
			} {
				t.Run(tc.name, func(t *testing.T) {
					_, err := c.Decode(tc.in)
					require.ErrorIs(t, err, schemaregistry.ErrWireFormat)
					require.ErrorIs(t, err, flechtwerk.ErrInvalidRecord)
					require.ErrorContains(t, err, tc.msg)
				})
			}
		})
	}
}

func TestJSONSchemaValidates(t *testing.T) {
	reg := registries(t)[0]
	c, err := schemaregistry.JSONSchema[order](reg.cl, topic(t), orderJSON)
	open(t, c, err)
	_, err = c.Encode(order{ID: "neg", Amount: -1})
	require.ErrorContains(t, err, "does not validate")
	b, _ := new(sr.ConfluentHeader).AppendEncode(nil, c.ID(), nil)
	_, err = c.Decode(append(b, `{"id":"neg","amount":-1}`...))
	require.ErrorIs(t, err, schemaregistry.ErrWireFormat)
	require.ErrorContains(t, err, "does not validate")
}

var schemaByID = regexp.MustCompile(`^/schemas/ids/[0-9]+$`)

// A value written with a newer schema of the subject decodes into the
// codec's schema (Avro resolution), fetching the writer schema once.
func TestDecodeFetchesWriterSchemaOnce(t *testing.T) {
	reg := registries(t)[0]
	var fetches atomic.Int32
	reg.fake.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet && schemaByID.MatchString(r.URL.Path) {
			fetches.Add(1)
		}
		return false
	})
	tp := topic(t)
	reader, err := schemaregistry.Avro[order](reg.cl, tp, orderAvro)
	open(t, reader, err)
	type orderV2 struct {
		ID       string `avro:"id"`
		Amount   int64  `avro:"amount"`
		Currency string `avro:"currency"`
	}
	writer, err := schemaregistry.Avro[orderV2](reg.cl, tp, orderAvroV2)
	open(t, writer, err)
	for i := range 3 {
		b, err := writer.Encode(orderV2{ID: "w", Amount: int64(i), Currency: "CHF"})
		require.NoError(t, err)
		got, err := reader.Decode(b)
		require.NoError(t, err)
		require.Equal(t, order{ID: "w", Amount: int64(i)}, got)
	}
	require.Equal(t, int32(1), fetches.Load())

	// A reader that never opened decodes too: by fetching ids.
	fresh, err := schemaregistry.Avro[order](reg.cl, tp, orderAvro)
	require.NoError(t, err)
	b, err := reader.Encode(order{ID: "r", Amount: 9})
	require.NoError(t, err)
	got, err := fresh.Decode(b)
	require.NoError(t, err)
	require.Equal(t, order{ID: "r", Amount: 9}, got)
}

// An unreachable registry while decoding an unseen id is not a wire-format
// error: the record is not proven bad.
func TestDecodeUnreachableIsNotWireFormat(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	cl, err := sr.NewClient(sr.URLs(url))
	require.NoError(t, err)
	c, err := schemaregistry.Avro[order](cl, "orders", orderAvro)
	require.NoError(t, err)
	_, err = c.Decode([]byte{0, 0, 0, 0, 1, 2, 'a', 2})
	require.Error(t, err)
	require.False(t, errors.Is(err, schemaregistry.ErrWireFormat), "%v", err)
	require.NotErrorIs(t, err, flechtwerk.ErrInvalidRecord)
	require.ErrorIs(t, err, flechtwerk.ErrUnavailable, "the runner aborts, never skips, such a record")
	require.ErrorContains(t, err, "schema id 1")
}
