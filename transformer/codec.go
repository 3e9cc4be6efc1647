package transformer

import "encoding/json"

// Codec encodes and decodes a value of T: a transformer's state (option
// StateCodec), its input values (InputCodec), the keys and values of a
// declared output (DeclareOutput), an extractor's cursor
// (extractor.CursorCodec). A state or declared output codec that also
// implements flechtwerk.Lifecycle (one that registers a schema, say) is
// opened by the runner before the first record, so a codec that cannot
// work fails Run before anything is processed, and closed after Run's
// engine stopped. An input codec only decodes and is not opened: a
// consumer registers nothing. Decode must
// return a value that shares no memory with its input (the runtime relies on
// every call receiving its own copy).
type Codec[T any] interface {
	Encode(T) ([]byte, error)
	Decode([]byte) (T, error)
}

type jsonCodec[S any] struct{}

func (jsonCodec[S]) Encode(s S) ([]byte, error) { return json.Marshal(s) }

func (jsonCodec[S]) Decode(b []byte) (S, error) {
	var s S
	err := json.Unmarshal(b, &s)
	return s, err
}

// JSON returns the default codec: encoding/json.
func JSON[S any]() Codec[S] { return jsonCodec[S]{} }

type bytesCodec struct{}

func (bytesCodec) Encode(b []byte) ([]byte, error) { return b, nil }

func (bytesCodec) Decode(b []byte) ([]byte, error) { return append([]byte(nil), b...), nil }

// Bytes returns a codec for raw []byte state, stored as is.
func Bytes() Codec[[]byte] { return bytesCodec{} }

type stringCodec struct{}

func (stringCodec) Encode(s string) ([]byte, error) { return []byte(s), nil }

func (stringCodec) Decode(b []byte) (string, error) { return string(b), nil }

// String returns a codec for strings, stored as their UTF-8 bytes (Kafka's
// StringSerializer): a nil input decodes to "".
func String() Codec[string] { return stringCodec{} }
