package schemaregistry

import (
	"fmt"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/flechtwerk/flechtwerk"
)

// Avro returns a codec for values of T in Avro (github.com/hamba/avro/v2:
// a struct with `avro:"field"` tags, a map, a primitive) under the given
// Avro schema (JSON text), registered under "<topic>-value" (see Key and
// Subject). A value written with another schema is read by Avro schema
// resolution into the codec's schema; a writer schema the codec's cannot
// read is a Decode error matching ErrWireFormat.
//
// The schema must parse, and the constructor returns a
// flechtwerk.CodeInvalidOption error otherwise.
func Avro[T any](cl *sr.Client, topic, schema string, opts ...Opt) (*Codec[T], error) {
	s, err := parseAvro(schema)
	if err != nil {
		return nil, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Avro schema", "%v", err)
	}
	return newCodec[T](cl, topic, sr.Schema{Schema: schema, Type: sr.TypeAvro}, &avroFormat[T]{schema: s}, opts)
}

// parseAvro parses with a cache of its own: hamba's default cache keys
// named types by name, and versions of one record share the name.
func parseAvro(schema string) (avro.Schema, error) {
	return avro.ParseWithCache(schema, "", &avro.SchemaCache{})
}

type avroFormat[T any] struct{ schema avro.Schema }

func (*avroFormat[T]) schemaType() sr.SchemaType { return sr.TypeAvro }
func (*avroFormat[T]) index() []int              { return nil }

func (f *avroFormat[T]) encode(v T) ([]byte, error) { return avro.Marshal(f.schema, v) }

func (f *avroFormat[T]) reader(s sr.Schema, own bool) (func([]byte) (T, error), error) {
	read := f.schema
	if !own {
		writer, err := parseAvro(s.Schema)
		if err != nil {
			return nil, fmt.Errorf("writer schema does not parse: %w", err)
		}
		if read, err = avro.NewSchemaCompatibility().Resolve(f.schema, writer); err != nil {
			return nil, fmt.Errorf("the codec's schema cannot read the writer schema: %w", err)
		}
	}
	return func(b []byte) (T, error) {
		// avro.Unmarshal takes an end of input inside the value for
		// its end: a truncated payload would decode.
		var v T
		r := avro.NewReader(nil, 0).Reset(b)
		r.ReadVal(read, &v)
		if r.Error != nil {
			return v, fmt.Errorf("payload does not decode: %w", r.Error)
		}
		return v, nil
	}, nil
}
