package batch

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Mode, Policy and the modes are package process's (the public contract
// a task runs with); the policy's steps below apply them.
type (
	Mode   = process.Mode
	Policy = process.Policy
)

// The modes of a Policy.
const (
	Crash      = process.Crash
	Skip       = process.Skip
	Substitute = process.Substitute
	DeadLetter = process.DeadLetter
)

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
func substituted(p *Policy, r *kgo.Record, ie *transformer.InvalidRecordError) (_ *kgo.Record, err error) {
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
func deadLetter(p *Policy, r *kgo.Record, ie *transformer.InvalidRecordError) *kgo.Record {
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

func logHandled(p *Policy, ie *transformer.InvalidRecordError) {
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

// SubstitutedRecord returns a copy of r with the value p's hook returns
// for ie; an invalid key, or a failing hook, is an error wrapping ie.
func SubstitutedRecord(p *Policy, r *kgo.Record, ie *transformer.InvalidRecordError) (*kgo.Record, error) {
	return substituted(p, r, ie)
}

// DeadLetterRecord returns the dead-letter record of r for p: its key,
// value and headers, then the KIP-1034 headers naming where it came from
// and why.
func DeadLetterRecord(p *Policy, r *kgo.Record, ie *transformer.InvalidRecordError) *kgo.Record {
	return deadLetter(p, r, ie)
}

// Log logs a record p handled (at warn level; nothing without a logger).
func Log(p *Policy, ie *transformer.InvalidRecordError) { logHandled(p, ie) }
