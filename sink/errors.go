package sink

import "fmt"

// RecordError is a record that could not be prepared for writing: its value
// did not decode, or the Expand step failed (Part says which). It ends Run;
// nothing at or after the record's offset is committed.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	// Part is "value" (the codec failed) or "expand".
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
