package transformer

import "fmt"

// ProcessError is the error of one input record: its transform (or its
// state-key function, or the state codec) failed, or a stateful transformer
// got an empty state key. The batch of the record's task was not committed:
// nothing of it is visible and its offsets did not advance, so the record is
// redelivered when the task runs again. A panic of user code is recovered
// into a ProcessError whose Err is a *flechtwerk.PanicError with the stack.
type ProcessError struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Err       error
}

func (e *ProcessError) Error() string {
	return fmt.Sprintf("transformer: transform failed at topic %s partition %d offset %d (key %q): %v; batch aborted, offsets not advanced",
		e.Topic, e.Partition, e.Offset, e.Key, e.Err)
}

// Unwrap returns Err.
func (e *ProcessError) Unwrap() error { return e.Err }
