package configtopic

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/flechtwerk/flechtwerk"
)

// Header is a Kafka record header (the same type as flechtwerk.Header and
// transformer.Header).
type Header = flechtwerk.Header

// Record is one config record as read from a config topic (the same type as
// flechtwerk.Record and transformer.Record, so a transformer can use config
// records as they are).
type Record = flechtwerk.Record

// Entry is the live config of one key: the record that set it and its
// decoded (and enriched) value.
type Entry[C any] struct {
	Record
	Config C
}

// Decoder decodes a config record's value. transformer.JSON and
// transformer.Bytes satisfy it too.
type Decoder[C any] interface {
	Decode([]byte) (C, error)
}

type jsonDecoder[C any] struct{}

func (jsonDecoder[C]) Decode(b []byte) (C, error) {
	var c C
	err := json.Unmarshal(b, &c)
	return c, err
}

// JSON returns the default decoder: encoding/json into C.
func JSON[C any]() Decoder[C] { return jsonDecoder[C]{} }

type bytesDecoder struct{}

func (bytesDecoder) Decode(b []byte) ([]byte, error) { return bytes.Clone(b), nil }

// Bytes returns a decoder that keeps the raw value.
func Bytes() Decoder[[]byte] { return bytesDecoder{} }

// EnrichFunc is applied once to every decoded config value that enters the
// Table: during the bootstrap once per surviving key, after the read
// reached the end; while running once per new record. It returns the
// config to keep, or an error that ends Run.
type EnrichFunc[C any] func(ctx context.Context, rec *Record, cfg C) (C, error)

// RecordError is a config record that could not be decoded or enriched:
// during the bootstrap the surviving value of its key, later a new record.
// Run ended with it; the Table keeps what it had before the record. Replace
// the record (write a new value or a tombstone for the key) and restart: a
// replaced value is not decoded again.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("configtopic: undecodable config record at topic %s partition %d offset %d (key %q): %v",
		e.Topic, e.Partition, e.Offset, e.Key, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }
