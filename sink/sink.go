package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Header is a record header (the same type as flechtwerk.Header).
type Header = flechtwerk.Header

// Record is one record handed to a Sink, with its value decoded by the
// stage's codec.
type Record[V any] struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	// Value is the decoded value; the zero V for a tombstone.
	Value     V
	Headers   []Header
	Timestamp time.Time
	// Tombstone is true for a record with a null value. Tombstones reach
	// the Sink only with the Tombstones option; otherwise they are
	// skipped (and their offsets committed like written ones).
	Tombstone bool
}

// Sink is what a user implements to write records outside Kafka: Write
// writes a batch and returns once it is durable (committed to the
// database, acknowledged by the API). The records of one call come from one
// partition, in offset order; calls for different partitions may run at
// the same time (see runner.Concurrency), calls for one partition never do.
//
// An error ends Run: nothing of the batch is committed to the group, and
// the records are delivered again after the restart (let it crash), unless
// runner.SinkRetry classifies the error as transient: then the batch is
// written again, with backoff, within the policy's bounds. Under
// at-least-once a record may therefore be written more than once: make
// Write idempotent (an upsert on a natural key, an idempotency key). A
// Sink that also implements flechtwerk.Lifecycle is opened before the
// first record and closed after the last.
type Sink[V any] interface {
	Write(ctx context.Context, batch []Record[V]) error
}

// WriteFunc adapts a function to a Sink.
type WriteFunc[V any] func(ctx context.Context, batch []Record[V]) error

// Write calls f.
func (f WriteFunc[V]) Write(ctx context.Context, batch []Record[V]) error { return f(ctx, batch) }

// Mode is a sink's delivery mode. Exactly-once covers Kafka to Kafka only
// (transformers and extractors); a sink declares one of the two modes a
// write outside Kafka allows.
type Mode int

const (
	// AtLeastOnce commits a record's offset to the consumer group only
	// after every output it produced was durably written (Write
	// returned). A crash re-delivers what was not yet committed:
	// nothing is lost, duplicates are possible, so Write must be
	// idempotent. This is what sinks should use.
	AtLeastOnce Mode = iota + 1
	// AtMostOnce commits offsets on a timer (runner.AutoCommitInterval),
	// decoupled from writing: no duplicates after a crash, but a crash
	// LOSES every record that was polled and not yet written. Fine for
	// metrics and telemetry, never for data that must arrive.
	AtMostOnce
)

func (m Mode) String() string {
	switch m {
	case AtLeastOnce:
		return "AtLeastOnce"
	case AtMostOnce:
		return "AtMostOnce"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ResumeFunc returns the explicit resume state of the partitions of topic
// a runner was just assigned: the next offset to read, by partition, for
// the partitions the sink knows (typically read from the sink's own table,
// written in the same database transaction as the rows). Partitions it
// leaves out start from the group's committed offset, else the reset policy
// (the earliest offset). An error ends Run.
type ResumeFunc func(ctx context.Context, topic string, partitions []int32) (map[int32]int64, error)

// ExpandFunc turns one record into the records to write for it: none (the
// record is released at once), one, or several. Each output is accounted:
// the input's offset is committed only after all its outputs are written.
type ExpandFunc[V any] func(ctx context.Context, rec Record[V]) ([]Record[V], error)

// Opt configures a sink stage.
type Opt interface{ apply(*cfg) }

type cfg struct {
	mode       Mode
	modeSet    bool
	codec      any // transformer.Codec[V]
	expand     any // ExpandFunc[V]
	resume     ResumeFunc
	tombstones bool
}

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

// Delivery declares the sink's delivery mode: AtLeastOnce or AtMostOnce.
// Required: a sink that declares none is refused by runner.NewSink
// (flechtwerk.CodeNoDelivery).
func Delivery(m Mode) Opt { return optFunc(func(c *cfg) { c.mode, c.modeSet = m, true }) }

// ValueCodec sets the codec that decodes record values into V. Default
// transformer.JSON[V](); transformer.Bytes() passes raw bytes ([]byte
// sinks). A codec of another type than the sink's V is refused by New. A
// value that does not decode is an invalid record
// (*transformer.InvalidRecordError, Part value): the runner's
// InvalidRecords policy decides what becomes of it (by default Run ends).
func ValueCodec[V any](c transformer.Codec[V]) Opt { return optFunc(func(cf *cfg) { cf.codec = c }) }

// Expand sets a step that turns each record into the records to write
// (fan-out, filtering). V must be the sink's value type. An error wrapping
// transformer.ErrInvalidRecord (transformer.Invalid) marks the record
// invalid, for the runner's InvalidRecords policy; any other error ends Run
// (a *RecordError). Write cannot reject single records: its error is the
// batch's.
func Expand[V any](fn ExpandFunc[V]) Opt { return optFunc(func(c *cfg) { c.expand = fn }) }

// Resume sets the hook that returns the explicit resume state of assigned
// partitions. Start offsets are taken, in this order, from the hook, the
// group's committed offset, the reset policy (earliest). The committed
// offset seen at assignment stays a floor: when the hook's offset is
// behind it, the records in between are written again but the group's
// offset is never rewound (and a warning is logged: the resume state is
// stale).
func Resume(fn ResumeFunc) Opt { return optFunc(func(c *cfg) { c.resume = fn }) }

// Tombstones hands records with a null value to the Sink with Tombstone set
// (e.g. to delete the row). Without it tombstones are skipped.
func Tombstones() Opt { return optFunc(func(c *cfg) { c.tombstones = true }) }

// Stage is a sink ready to run: pass it to runner.NewSink.
type Stage[V any] struct {
	handle
	sink       Sink[V]
	mode       Mode
	codec      transformer.Codec[V]
	expand     ExpandFunc[V]
	resume     ResumeFunc
	tombstones bool
	err        error
}

// New returns a sink stage writing to s. Problems (a nil sink, no declared
// delivery mode, a codec of the wrong type) are reported by Validate and
// runner.NewSink.
func New[V any](s Sink[V], opts ...Opt) *Stage[V] {
	var c cfg
	for _, o := range opts {
		o.apply(&c)
	}
	st := &Stage[V]{sink: s, mode: c.mode, resume: c.resume, tombstones: c.tombstones, codec: transformer.JSON[V]()}
	st.handle = stage.NewHandle(adapter[V]{st}, s)
	var errs []error
	if s == nil {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "sink", "sink is nil"))
	}
	switch {
	case !c.modeSet:
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeNoDelivery, "sink.Delivery",
			"a sink must declare its delivery mode: sink.Delivery(sink.AtLeastOnce) or sink.Delivery(sink.AtMostOnce)"))
	case c.mode != AtLeastOnce && c.mode != AtMostOnce:
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "sink.Delivery",
			"unknown delivery mode %d (exactly-once covers Kafka to Kafka only)", int(c.mode)))
	}
	if c.codec != nil {
		if codec, ok := c.codec.(transformer.Codec[V]); ok {
			st.codec = codec
		} else {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "sink.ValueCodec",
				"codec %T does not decode the sink's value type %s", c.codec, typeName[V]()))
		}
	}
	if c.expand != nil {
		if fn, ok := c.expand.(ExpandFunc[V]); ok && fn != nil {
			st.expand = fn
		} else {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "sink.Expand",
				"expand function %T is nil or not for the sink's value type %s", c.expand, typeName[V]()))
		}
	}
	st.err = errors.Join(errs...)
	return st
}

func typeName[V any]() string { return fmt.Sprintf("%T", *new(V)) }

// Validate reports a problem found when the stage was built.
func (s *Stage[V]) Validate() error {
	if s == nil {
		return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "sink", "sink stage is nil")
	}
	return s.err
}

// Mode returns the declared delivery mode.
func (s *Stage[V]) Mode() Mode { return s.mode }
