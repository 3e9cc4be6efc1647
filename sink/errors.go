package sink

import "fmt"

// RecordError is a record whose Expand step failed with an error that does
// not mark it invalid, or whose value codec failed with an error matching
// flechtwerk.ErrUnavailable. It ends Run; nothing at or after the record's
// offset is committed. A value that does not decode, or a record Expand rejects
// with transformer.ErrInvalidRecord (transformer.Invalid), is an invalid
// record instead: a *transformer.InvalidRecordError, handled by the
// runner's InvalidRecords policy (by default it ends Run as well).
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	// Part is "expand" or "value".
	Part string
	Err  error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("sink: record %s[%d]@%d: %s: %v", e.Topic, e.Partition, e.Offset, e.Part, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// WriteError is a failed Write: the batch of partition Topic[Partition]
// holding offsets First through Last. It ends Run; none of those offsets is
// committed, so the records are delivered again after the restart.
type WriteError struct {
	Topic       string
	Partition   int32
	First, Last int64
	Err         error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("sink: writing %s[%d] offsets %d..%d failed (none of them is committed; they are delivered again after a restart): %v",
		e.Topic, e.Partition, e.First, e.Last, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }
