package process

import (
	"log/slog"
	"strconv"
	"sync/atomic"

	"github.com/flechtwerk/flechtwerk"
)

// Mode is what becomes of an invalid record (a
// *flechtwerk.InvalidRecordError that Prepare or Process returned).
type Mode int

const (
	// Crash ends the batch with the record's error: nothing of it is
	// committed. The default.
	Crash Mode = iota
	// Skip drops the record; its offset commits with the batch.
	Skip
	// Substitute runs the record again with the value the policy's hook
	// returns (a key is never substituted).
	Substitute
	// DeadLetter emits the original record, with headers that say where it
	// came from and why, to the dead-letter topic as an output of the
	// batch: it commits in the batch's transaction.
	DeadLetter
)

func (m Mode) String() string {
	switch m {
	case Crash:
		return "crash"
	case Skip:
		return "skip"
	case Substitute:
		return "substitute"
	case DeadLetter:
		return "dead-letter"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Policy is what a task does with the invalid records of its batches, and
// its counts. A task reads Mode, DeadLetterTopic, Substitute and Logger
// and adds to the counts; a Policy must not be copied once in use.
type Policy struct {
	Mode Mode
	// DeadLetterTopic is the topic of DeadLetter.
	DeadLetterTopic string
	// Substitute returns the replacement value of Substitute. It runs
	// concurrently for records of different state keys.
	Substitute func(*flechtwerk.InvalidRecordError) ([]byte, error)
	// Logger logs every record the policy handled (nil: none).
	Logger *slog.Logger

	// Counts of the records handled in batches that processed completely
	// (counted before the commit: a batch that fails to commit and is
	// replayed in the same process counts its records again).
	Skipped, Substituted, DeadLettered atomic.Int64
}
