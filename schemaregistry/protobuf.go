package schemaregistry

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/flechtwerk/flechtwerk"
)

// Protobuf returns a codec for the generated message type T (a pointer,
// such as *orderpb.Order) under the given schema: the text of the .proto
// file T was generated from (the registry stores .proto text; imports are
// declared with References). The message index written after the schema
// id is T's position in that file (Confluent's nested-index list), taken
// from T's descriptor. The schema is registered under "<topic>-value"
// (see Key and Subject).
//
// Decode reads the payload as T whatever the writer's message index, as
// Confluent's specific deserializer does; for the codec's own schema (its
// id, or a registered schema of the same text and references, opened or
// not) it checks that the index is T's.
func Protobuf[T proto.Message](cl *sr.Client, topic, schema string, opts ...Opt) (*Codec[T], error) {
	var zero T
	md := zero.ProtoReflect().Descriptor()
	if strings.TrimSpace(schema) == "" {
		return nil, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Protobuf schema", "empty schema for message %s", md.FullName())
	}
	if !strings.Contains(schema, string(md.Name())) {
		return nil, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Protobuf schema",
			"the schema text does not declare message %s (is it %s?)", md.Name(), md.ParentFile().Path())
	}
	return newCodec[T](cl, topic, sr.Schema{Schema: schema, Type: sr.TypeProtobuf},
		&protoFormat[T]{idx: messageIndex(md), new: zero.ProtoReflect().Type()}, newOpts(opts))
}

// messageIndex is the path of md in its file: the index of its top-level
// message, then of each nested message down to md.
func messageIndex(md protoreflect.MessageDescriptor) []int {
	var idx []int
	for d := protoreflect.Descriptor(md); ; {
		idx = append([]int{d.Index()}, idx...)
		p, ok := d.Parent().(protoreflect.MessageDescriptor)
		if !ok {
			return idx
		}
		d = p
	}
}

type protoFormat[T proto.Message] struct {
	idx []int
	new protoreflect.MessageType
}

func (*protoFormat[T]) schemaType() sr.SchemaType { return sr.TypeProtobuf }
func (f *protoFormat[T]) index() []int            { return f.idx }

func (f *protoFormat[T]) encode(v T) ([]byte, error) {
	if !v.ProtoReflect().IsValid() {
		return nil, fmt.Errorf("nil %T", v)
	}
	return proto.Marshal(v)
}

func (*protoFormat[T]) usesRefs() bool { return false }

func (f *protoFormat[T]) reader(sr.Schema, bool, []string) (func([]byte) (T, error), error) {
	return func(b []byte) (T, error) {
		m := f.new.New().Interface()
		if err := proto.Unmarshal(b, m); err != nil {
			var zero T
			return zero, err
		}
		return m.(T), nil
	}, nil
}
