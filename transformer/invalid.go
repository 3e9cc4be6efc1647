package transformer

import "github.com/flechtwerk/flechtwerk"

// Part names the part of a record that made it invalid (the same type as
// flechtwerk.Part).
type Part = flechtwerk.Part

const (
	// PartKey: the record key.
	PartKey = flechtwerk.PartKey
	// PartValue: the record value (a value that does not decode is one).
	PartValue = flechtwerk.PartValue
	// PartHeader: a header; InvalidRecordError.Header names it.
	PartHeader = flechtwerk.PartHeader
)

// ErrInvalidRecord marks a record as invalid: a transform that returns an
// error wrapping it (fmt.Errorf("amount %q: %w", s, transformer.ErrInvalidRecord))
// rejects the record's value, like Invalid. errors.Is(err,
// ErrInvalidRecord) is true for every *InvalidRecordError. It is
// flechtwerk.ErrInvalidRecord.
var ErrInvalidRecord = flechtwerk.ErrInvalidRecord

// InvalidRecordError is an invalid record (the same type as
// flechtwerk.InvalidRecordError, where its fields are documented): its
// value did not decode with the transformer's InputCodec, or its transform
// rejected it (Invalid, InvalidKey, InvalidHeader, or an error wrapping
// ErrInvalidRecord).
type InvalidRecordError = flechtwerk.InvalidRecordError

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
