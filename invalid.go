package flechtwerk

import (
	"errors"
	"fmt"
)

// Part names the part of a record that made it invalid.
type Part string

const (
	// PartKey: the record key.
	PartKey Part = "key"
	// PartValue: the record value (a value that does not decode is one).
	PartValue Part = "value"
	// PartHeader: a header; InvalidRecordError.Header names it.
	PartHeader Part = "header"
)

// ErrInvalidRecord marks a record as invalid: a transform (or a sink's
// Expand step) that returns an error wrapping it
// (fmt.Errorf("amount %q: %w", s, transformer.ErrInvalidRecord)) rejects
// the record's value, like transformer.Invalid. errors.Is(err,
// ErrInvalidRecord) is true for every *InvalidRecordError. Package
// transformer re-exports it.
var ErrInvalidRecord = errors.New("invalid record")

// ErrUnavailable marks a codec's Decode error as not the record's fault: a
// service the codec needs (a schema registry) could not be reached. Such an
// error is never an invalid record, whatever the InvalidRecords policy: the
// call fails, its transaction is aborted (a sink commits nothing past the
// record) and Run ends, so the record is read again when the stage runs
// again. Codecs wrap it: fmt.Errorf("fetch schema 7: %w: %w",
// flechtwerk.ErrUnavailable, err).
var ErrUnavailable = errors.New("unavailable")

// InvalidRecordError is an invalid record: its value did not decode with
// the stage's input codec, or its transform rejected it
// (transformer.Invalid, InvalidKey, InvalidHeader, or an error wrapping
// ErrInvalidRecord). Package transformer re-exports it.
//
// What becomes of it is the runner's policy (runner.InvalidRecords): by
// default Run ends with this error, the task's batch aborted and its
// offsets not advanced (the record comes back when the process restarts);
// the policy may instead skip it, substitute its value, or send it to a
// dead-letter topic, inside the batch's transaction.
type InvalidRecordError struct {
	// Topic, Partition and Offset locate the record.
	Topic     string
	Partition int32
	Offset    int64
	// Part is the part that failed; Header is the header's key when Part
	// is PartHeader.
	Part   Part
	Header string
	// Key, Value and Headers are the record's raw bytes, as read.
	Key     []byte
	Value   []byte
	Headers []Header
	// Err is the cause: the codec's error or the transform's.
	Err error
}

func (e *InvalidRecordError) Error() string {
	part := string(e.Part)
	if e.Part == PartHeader {
		part = fmt.Sprintf("header %q", e.Header)
	}
	return fmt.Sprintf("transformer: invalid record at topic %s partition %d offset %d (key %q): invalid %s: %v",
		e.Topic, e.Partition, e.Offset, e.Key, part, e.Err)
}

// Unwrap returns Err.
func (e *InvalidRecordError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidRecord.
func (e *InvalidRecordError) Is(target error) bool { return target == ErrInvalidRecord }

// Raw returns the raw bytes of the part that failed: the key, the value,
// or the first header named Header.
func (e *InvalidRecordError) Raw() []byte {
	switch e.Part {
	case PartKey:
		return e.Key
	case PartHeader:
		for _, h := range e.Headers {
			if h.Key == e.Header {
				return h.Value
			}
		}
		return nil
	default:
		return e.Value
	}
}
