package transformer

import (
	"fmt"
	"time"
)

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

// TimerError is the error of a timer's callback (OnTimer, or OnExpire of
// a state TTL): it failed or panicked (Err is then a
// *flechtwerk.PanicError with the stack). The batch of the timer's task
// was not committed: the timer is still set and fires again when the task
// runs again, with the batch's records redelivered.
type TimerError struct {
	Partition int32
	// Key is the state key the timer belongs to.
	Key  []byte
	Name string
	Due  time.Time
	Err  error
}

func (e *TimerError) Error() string {
	return fmt.Sprintf("transformer: timer %q of key %q (partition %d, due %s) failed: %v; batch aborted, offsets not advanced",
		e.Name, e.Key, e.Partition, e.Due.UTC().Format(time.RFC3339Nano), e.Err)
}

// Unwrap returns Err.
func (e *TimerError) Unwrap() error { return e.Err }
