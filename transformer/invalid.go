package transformer

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

// ErrInvalidRecord marks a record as invalid: a transform that returns an
// error wrapping it (fmt.Errorf("amount %q: %w", s, transformer.ErrInvalidRecord))
// rejects the record's value, like Invalid. errors.Is(err,
// ErrInvalidRecord) is true for every *InvalidRecordError.
var ErrInvalidRecord = errors.New("invalid record")

// InvalidRecordError is an invalid record: its value did not decode with
// the transformer's InputCodec, or its transform rejected it (Invalid,
// InvalidKey, InvalidHeader, or an error wrapping ErrInvalidRecord).
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

// Invalid rejects the record's value: a transform returns Invalid(err) for
// a record it cannot process because of what the value holds. The runtime
// fills in where the record came from.
func Invalid(err error) error { return &InvalidRecordError{Part: PartValue, Err: cause(err)} }

// InvalidKey rejects the record's key. A key is never substituted: under
// the Substitute policy an invalid key ends Run.
func InvalidKey(err error) error { return &InvalidRecordError{Part: PartKey, Err: cause(err)} }

// InvalidHeader rejects the header key of the record.
func InvalidHeader(key string, err error) error {
	return &InvalidRecordError{Part: PartHeader, Header: key, Err: cause(err)}
}

func cause(err error) error {
	if err == nil {
		return ErrInvalidRecord
	}
	return err
}
