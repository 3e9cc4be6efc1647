package transformer

import "encoding/json"

// Codec encodes and decodes a value of T: a transformer's state (option
// StateCodec), an extractor's cursor (extractor.CursorCodec). Decode must
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
