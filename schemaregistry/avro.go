package schemaregistry

import (
	"errors"
	"fmt"
	"strings"

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
// A schema that uses named types of other registered schemas declares
// them with Reference (their text, in dependency order); a writer schema
// with references is read after Decode fetched the schemas it references
// by subject and version.
//
// The schema must parse (after the referenced schemas given with
// Reference), and the constructor returns a flechtwerk.CodeInvalidOption
// error otherwise.
func Avro[T any](cl *sr.Client, topic, schema string, opts ...Opt) (*Codec[T], error) {
	c := newOpts(opts)
	var texts, missing []string
	for _, r := range c.references {
		if r.text == "" {
			missing = append(missing, fmt.Sprintf("%s (subject %s version %d)", r.ref.Name, r.ref.Subject, r.ref.Version))
			continue
		}
		texts = append(texts, r.text)
	}
	s, err := parseAvro(schema, texts)
	if err != nil {
		if len(missing) > 0 {
			err = fmt.Errorf("%w; references without their schema text (declare them with schemaregistry.Reference): %s",
				err, strings.Join(missing, ", "))
		}
		return nil, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Avro schema", "%v", err)
	}
	return newCodec[T](cl, topic, sr.Schema{Schema: schema, Type: sr.TypeAvro}, &avroFormat[T]{schema: s}, c)
}

// parseAvro parses schema after refs (in dependency order), with a cache
// of its own: hamba's default cache keys named types by name, and
// versions of one record share the name.
func parseAvro(schema string, refs []string) (avro.Schema, error) {
	cache := &avro.SchemaCache{}
	for i, r := range refs {
		if _, err := avro.ParseWithCache(r, "", cache); err != nil {
			return nil, fmt.Errorf("referenced schema %d of %d: %w", i+1, len(refs), err)
		}
	}
	s, err := avro.ParseWithCache(schema, "", cache)
	if err != nil && len(refs) > 0 {
		err = errors.Join(err, fmt.Errorf("after %d referenced schemas", len(refs)))
	}
	return s, err
}

type avroFormat[T any] struct{ schema avro.Schema }

func (*avroFormat[T]) schemaType() sr.SchemaType { return sr.TypeAvro }
func (*avroFormat[T]) index() []int              { return nil }
func (*avroFormat[T]) usesRefs() bool            { return true }

func (f *avroFormat[T]) encode(v T) ([]byte, error) { return avro.Marshal(f.schema, v) }

func (f *avroFormat[T]) reader(s sr.Schema, own bool, refs []string) (func([]byte) (T, error), error) {
	read := f.schema
	if !own {
		writer, err := parseAvro(s.Schema, refs)
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
