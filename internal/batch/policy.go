package batch

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Mode is what becomes of an invalid record (a *transformer.InvalidRecordError).
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

// Dead-letter headers, the names Kafka Streams writes (KIP-1034,
// org.apache.kafka.streams.errors.internals.ExceptionHandlerUtils), so that
// tooling written for Kafka Streams' dead-letter queues reads ours. Values
// are UTF-8 text; partition and offset are decimal.
const (
	HeaderException  = "__streams.errors.exception"
	HeaderStacktrace = "__streams.errors.stacktrace"
	HeaderMessage    = "__streams.errors.message"
	HeaderTopic      = "__streams.errors.topic"
	HeaderPartition  = "__streams.errors.partition"
	HeaderOffset     = "__streams.errors.offset"
	// HeaderPart is ours: the part that failed (key, value, header).
	HeaderPart = "__flechtwerk.errors.part"
)

// Policy is what a runner does with invalid records, and its counts.
type Policy struct {
	Mode Mode
	// DeadLetterTopic is the topic of DeadLetter.
	DeadLetterTopic string
	// Substitute returns the replacement value of Substitute.
	Substitute func(*transformer.InvalidRecordError) ([]byte, error)
	// Logger logs every record the policy handled (nil: none).
	Logger *slog.Logger

	// Counts of the records handled in batches that processed completely
	// (counted before the commit: a batch that fails to commit and is
	// replayed in the same process counts its records again).
	Skipped, Substituted, DeadLettered atomic.Int64
}

// counts are the records a batch handled by policy, added to the Policy
// once the batch processed completely.
type counts struct{ skipped, substituted, dead int64 }

func (c *counts) add(o counts) {
	c.skipped += o.skipped
	c.substituted += o.substituted
	c.dead += o.dead
}

// asInvalid reports whether err marks r as invalid, and returns the
// record's *transformer.InvalidRecordError with its location and raw bytes
// (a copy: the transform's error is not modified).
func asInvalid(r *kgo.Record, err error) (*transformer.InvalidRecordError, bool) {
	var ie *transformer.InvalidRecordError
	switch {
	case errors.As(err, &ie):
		c := *ie
		ie = &c
	case errors.Is(err, transformer.ErrInvalidRecord):
		ie = &transformer.InvalidRecordError{Part: transformer.PartValue, Err: err}
	default:
		return nil, false
	}
	ie.Topic, ie.Partition, ie.Offset = r.Topic, r.Partition, r.Offset
	ie.Key, ie.Value = r.Key, r.Value
	ie.Headers = nil
	for _, h := range r.Headers {
		ie.Headers = append(ie.Headers, transformer.Header{Key: h.Key, Value: h.Value})
	}
	return ie, true
}

// substituted returns a copy of r with the value the policy's hook returns
// for ie; a key is never substituted.
func (p *Policy) substituted(r *kgo.Record, ie *transformer.InvalidRecordError) (_ *kgo.Record, err error) {
	if ie.Part == transformer.PartKey {
		return nil, fmt.Errorf("%w (policy substitute: a key is never substituted)", ie)
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: policy substitute: the hook panicked: %w", ie, flechtwerk.Recovered(v))
		}
	}()
	v, err := p.Substitute(ie)
	if err != nil {
		return nil, fmt.Errorf("%w: policy substitute: the hook failed: %w", ie, err)
	}
	c := *r
	c.Value = v
	return &c, nil
}

// deadLetter returns the dead-letter record of r: its key, value and
// headers, then the KIP-1034 headers naming where it came from and why.
// The partitioner hashes its key, like any output.
func (p *Policy) deadLetter(r *kgo.Record, ie *transformer.InvalidRecordError) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(r.Headers)+7)
	hs = append(hs, r.Headers...)
	text := func(k, v string) { hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	text(HeaderException, fmt.Sprintf("%T", ie.Err))
	text(HeaderMessage, ie.Error())
	text(HeaderStacktrace, trace(ie))
	text(HeaderTopic, r.Topic)
	text(HeaderPartition, strconv.FormatInt(int64(r.Partition), 10))
	text(HeaderOffset, strconv.FormatInt(r.Offset, 10))
	text(HeaderPart, string(ie.Part))
	return &kgo.Record{Topic: p.DeadLetterTopic, Partition: -1, Key: r.Key, Value: r.Value, Headers: hs}
}

// trace is the stacktrace header: Go errors carry no stack, so it is the
// chain of the error's causes, one "type: message" a line, and the stack
// of a recovered panic.
func trace(err error) string {
	var b strings.Builder
	for e := err; e != nil; e = errors.Unwrap(e) {
		fmt.Fprintf(&b, "%T: %v\n", e, e)
		if pe, ok := e.(*flechtwerk.PanicError); ok {
			b.Write(pe.Stack)
			break
		}
	}
	return b.String()
}

func (p *Policy) log(ie *transformer.InvalidRecordError) {
	if p.Logger == nil {
		return
	}
	p.Logger.Warn("invalid record handled by policy", "policy", p.Mode.String(),
		"topic", ie.Topic, "partition", ie.Partition, "offset", ie.Offset, "part", string(ie.Part), "err", ie.Err)
}

// The helpers below are the policy's steps for runners that apply it
// outside Run (the sink runner).

// AsInvalid reports whether err marks r as invalid and returns the
// record's *transformer.InvalidRecordError with its location and raw bytes.
func AsInvalid(r *kgo.Record, err error) (*transformer.InvalidRecordError, bool) {
	return asInvalid(r, err)
}

// SubstitutedRecord returns a copy of r with the value the policy's hook
// returns for ie; an invalid key, or a failing hook, is an error wrapping
// ie.
func (p *Policy) SubstitutedRecord(r *kgo.Record, ie *transformer.InvalidRecordError) (*kgo.Record, error) {
	return p.substituted(r, ie)
}

// DeadLetterRecord returns the dead-letter record of r: its key, value
// and headers, then the KIP-1034 headers naming where it came from and
// why.
func (p *Policy) DeadLetterRecord(r *kgo.Record, ie *transformer.InvalidRecordError) *kgo.Record {
	return p.deadLetter(r, ie)
}

// Log logs a record the policy handled (at warn level; nothing without a
// logger).
func (p *Policy) Log(ie *transformer.InvalidRecordError) { p.log(ie) }
