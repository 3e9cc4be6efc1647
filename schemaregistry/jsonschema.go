package schemaregistry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/flechtwerk/flechtwerk"
)

// JSONSchema returns a codec for values of T as JSON (encoding/json),
// validated against the given JSON Schema (github.com/santhosh-tekuri/
// jsonschema/v6): Encode refuses a value that does not validate against
// the codec's schema, and Decode one that does not validate against the
// schema it was written with (fetched by its id). The schema is
// registered under "<topic>-value" (see Key and Subject).
//
// The schema must compile, and the constructor returns a
// flechtwerk.CodeInvalidOption error otherwise. An external $ref (to
// another document, a referenced schema) is not resolved: the schema
// does not compile, and a writer schema with one is a Decode error
// matching ErrWireFormat.
func JSONSchema[T any](cl *sr.Client, topic, schema string, opts ...Opt) (*Codec[T], error) {
	s, err := compileJSONSchema(schema)
	if err != nil {
		return nil, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "JSON schema", "%v", err)
	}
	return newCodec[T](cl, topic, sr.Schema{Schema: schema, Type: sr.TypeJSON}, &jsonFormat[T]{schema: s}, newOpts(opts))
}

func compileJSONSchema(schema string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource("schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("schema.json")
}

// noLoader refuses every external $ref: the default loader would read a
// local file named by a schema's (or a writer schema's) $ref.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %s: JSON Schema references are not resolved", url)
}

type jsonFormat[T any] struct{ schema *jsonschema.Schema }

func (*jsonFormat[T]) schemaType() sr.SchemaType { return sr.TypeJSON }
func (*jsonFormat[T]) index() []int              { return nil }

func (f *jsonFormat[T]) encode(v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if err := validateJSON(f.schema, b); err != nil {
		return nil, err
	}
	return b, nil
}

func validateJSON(s *jsonschema.Schema, b []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("value does not validate against the schema: %w", err)
	}
	return nil
}

func (*jsonFormat[T]) usesRefs() bool { return false }

func (f *jsonFormat[T]) reader(s sr.Schema, own bool, _ []string) (func([]byte) (T, error), error) {
	schema := f.schema
	if !own {
		var err error
		if schema, err = compileJSONSchema(s.Schema); err != nil {
			return nil, fmt.Errorf("writer schema does not compile: %w", err)
		}
	}
	return func(b []byte) (T, error) {
		var v T
		if err := validateJSON(schema, b); err != nil {
			return v, err
		}
		err := json.Unmarshal(b, &v)
		return v, err
	}, nil
}
