package extractor

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Output is one record to produce in a page's transaction. It goes to the
// partition set by ToPartition, else to the one chosen by hashing Key with
// Kafka's default (murmur2) partitioner (records without a key stick to
// a partition per produce batch). A partition its topic does not have
// fails the page's transaction with an *flechtwerk.OutputError
// (flechtwerk.CodeOutputPartition): nothing of the page is visible, its
// cursor did not move, and the poll fails with it. Its Timestamp is the
// record's (the zero time: the produce time).
type Output = transformer.Output

// Header is a Kafka record header (the same type as flechtwerk.Header).
type Header = flechtwerk.Header

// Config is the config record one poll runs for: the record as read from
// the config topic and its decoded (and enriched) value.
type Config[C any] = configtopic.Entry[C]

// Poller is what a user implements for an extractor: Poll is called once
// per live config per poll interval, with that config's cursor (the zero
// value of S before the first Commit of the config; see Emitter.HadCursor).
// It sends records through out and closes pages with out.Commit. Records
// sent after the last Commit are committed as a trailing page when Poll
// returns nil. Polls of different configs may run concurrently, so Poll
// must be safe for concurrent use; polls of one config never overlap.
//
// Poll must return promptly once ctx is done: ctx ends when the config's
// ownership token moves to another instance, when Run stops, and when a
// page exceeds PageTimeout. Its open page is then aborted. An error ends
// Run (unless runner.PollRetry classifies it as transient); the open page
// is aborted and the next owner resumes from the last committed cursor.
// A value that also implements flechtwerk.Lifecycle is opened before the
// first poll and closed after the last.
//
// Build a stage with From (New for a Func).
type Poller[C, S any] interface {
	Poll(ctx context.Context, cfg Config[C], cursor S, out *Emitter[S]) error
}

// Func adapts a poll function to a Poller, as http.HandlerFunc adapts one
// to an http.Handler.
type Func[C, S any] func(ctx context.Context, cfg Config[C], cursor S, out *Emitter[S]) error

// Poll calls f.
func (f Func[C, S]) Poll(ctx context.Context, cfg Config[C], cursor S, out *Emitter[S]) error {
	return f(ctx, cfg, cursor, out)
}

// Emitter collects the records of a poll's open page and closes pages. It
// belongs to one poll call: it is not safe for concurrent use and must not
// be kept after the call returns.
type Emitter[S any] struct {
	p     stage.Page
	codec transformer.Codec[S]
	had   bool
}

// Send adds a record to the open page, partitioned by key.
func (e *Emitter[S]) Send(topic string, key, value []byte) {
	e.p.Add(&kgo.Record{Topic: topic, Partition: -1, Key: key, Value: value})
}

// SendRecord adds a fully specified record to the open page (see Output
// for its partition and timestamp). A negative ToPartition fails the
// poll with an *flechtwerk.OutputError and adds nothing.
func (e *Emitter[S]) SendRecord(o Output) {
	r := &kgo.Record{Topic: o.Topic, Partition: -1, Key: o.Key, Value: o.Value, Timestamp: o.Timestamp}
	if p, ok := o.Partition(); ok {
		if p < 0 {
			e.p.Fail(&flechtwerk.OutputError{Code: flechtwerk.CodeOutputPartition, Topic: o.Topic, Partition: p, Partitions: -1})
			return
		}
		r.Partition = p
	}
	if len(o.Headers) > 0 {
		r.Headers = make([]kgo.RecordHeader, len(o.Headers))
		for i, h := range o.Headers {
			r.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	e.p.Add(r)
}

// Pending returns how many records the open page holds.
func (e *Emitter[S]) Pending() int { return e.p.Pending() }

// HadCursor reports whether the config had a committed cursor when the
// poll began; when it did not, the cursor argument is the zero value of S.
func (e *Emitter[S]) HadCursor() bool { return e.had }

// Commit closes the open page: the records sent since the last Commit and
// cursor become visible together, in one Kafka transaction of the config's
// ownership token, and cursor is what the next poll of the config receives
// (here or on the instance that takes the config over). Commit blocks until
// the broker confirmed the transaction; the transaction is not cut off by
// ctx (it is bounded by TransactionTimeout).
//
// On error nothing of the page is visible and the cursor did not move;
// return the error. A failed Commit ends Run (a fence, a broker error, an
// exceeded PageTimeout), except when the poll was canceled because its
// token moved or Run is stopping: then the new owner resumes from the last
// committed cursor. After an error every later Commit fails too.
func (e *Emitter[S]) Commit(ctx context.Context, cursor S) error {
	b, err := e.codec.Encode(cursor)
	if err != nil {
		err = fmt.Errorf("extractor: config %q: encoding cursor: %w", e.p.Key(), err)
		e.p.Fail(err)
		return err
	}
	if b == nil {
		b = []byte{} // nil is a tombstone on the changelog
	}
	return e.p.Commit(ctx, b)
}

// Stage is an extractor ready to run: the user's Poller with its codecs.
// Build it with From or New; run it with runner.NewExtractor.
type Stage[C, S any] struct {
	handle
	fn     Poller[C, S]
	codec  transformer.Codec[S]
	config configtopic.Decoder[C]
	enrich configtopic.EnrichFunc[C]
	err    error
}

// Opt configures an extractor stage.
type Opt interface{ apply(*exCfg) }

type exCfg struct {
	codec  any
	config any
	enrich any
}

type exOpt func(*exCfg)

func (o exOpt) apply(c *exCfg) { o(c) }

// CursorCodec sets the codec of the cursor state in the changelog. Default
// transformer.JSON[S](). Its type must be the extractor's cursor type; a
// mismatch is reported by runner.NewExtractor with flechtwerk.CodeInvalidTransformer.
func CursorCodec[S any](c transformer.Codec[S]) Opt {
	return exOpt(func(cf *exCfg) { cf.codec = c })
}

// ConfigCodec sets the decoder of the config records' values. Default
// configtopic.JSON[C](). Its type must be the extractor's config type. A
// record it cannot decode ends Run with a *configtopic.RecordError naming
// topic, partition and offset.
func ConfigCodec[C any](d configtopic.Decoder[C]) Opt {
	return exOpt(func(cf *exCfg) { cf.config = d })
}

// Enrich sets a hook applied once to every decoded config record when it is
// read (not on every poll), e.g. to resolve a secret the record names. An
// error ends Run with a *configtopic.RecordError.
func Enrich[C any](fn configtopic.EnrichFunc[C]) Opt {
	return exOpt(func(cf *exCfg) { cf.enrich = fn })
}

// New returns an extractor stage calling the poll function fn: From(fn).
func New[C, S any](fn Func[C, S], opts ...Opt) *Stage[C, S] { return From[C, S](fn, opts...) }

// From returns an extractor stage over config type C and cursor type S
// polling with p. Every problem found (a nil Poller, a codec, decoder or
// hook of another type) is reported by Validate, joined with errors.Join.
func From[C, S any](p Poller[C, S], opts ...Opt) *Stage[C, S] {
	var c exCfg
	for _, o := range opts {
		o.apply(&c)
	}
	x := &Stage[C, S]{fn: p}
	x.handle = stage.NewHandle(engineView[C, S]{x}, p)
	var (
		zeroC C
		zeroS S
	)
	var errs []error
	if isNil(p) {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "Poller", "the poller (or poll function) is nil"))
	}
	switch codec := c.codec.(type) {
	case nil:
		x.codec = transformer.JSON[S]()
	case transformer.Codec[S]:
		x.codec = codec
	default:
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "CursorCodec",
			"codec %T does not encode the cursor type %T", codec, zeroS))
	}
	switch d := c.config.(type) {
	case nil:
		x.config = configtopic.JSON[C]()
	case configtopic.Decoder[C]:
		x.config = d
	default:
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "ConfigCodec",
			"decoder %T does not decode the config type %T", d, zeroC))
	}
	switch e := c.enrich.(type) {
	case nil:
	case configtopic.EnrichFunc[C]:
		x.enrich = e
	default:
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "Enrich",
			"enrich hook %T does not take the config type %T", e, zeroC))
	}
	x.err = errors.Join(errs...)
	return x
}

// isNil reports whether the user's value is nil: a nil interface or a nil
// function.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Func && rv.IsNil()
}

// Validate reports every problem found when the stage was built, as
// *flechtwerk.ConfigError values joined with errors.Join (nil when none).
func (x *Stage[C, S]) Validate() error {
	if x == nil {
		return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "extractor", "extractor stage is nil")
	}
	return x.err
}

// boxed carries a decoded config value of type C through the engine, which
// holds it as an any: unboxing checks the box's type, so a value of type C
// (even a nil interface value) always comes back, and anything else is an
// error, not a silent zero value.
type boxed[C any] struct{ v C }

// unbox returns the config value v holds.
func unbox[C any](v any) (C, error) {
	b, ok := v.(boxed[C])
	if !ok {
		var zero C
		return zero, fmt.Errorf("extractor: config value is a %T, not a decoded %T (a config entry of another extractor?)", v, zero)
	}
	return b.v, nil
}

type anyDecoder[C any] struct{ d configtopic.Decoder[C] }

func (a anyDecoder[C]) Decode(b []byte) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, flechtwerk.Recovered(p)
		}
	}()
	c, err := a.d.Decode(b)
	if err != nil {
		return nil, err
	}
	return boxed[C]{c}, nil
}

func (x *Stage[C, S]) decodeConfig() configtopic.Decoder[any] { return anyDecoder[C]{x.config} }

func (x *Stage[C, S]) enrichConfig() configtopic.EnrichFunc[any] {
	if x.enrich == nil {
		return nil
	}
	return func(ctx context.Context, rec *configtopic.Record, v any) (out any, err error) {
		defer func() {
			if p := recover(); p != nil {
				out, err = nil, flechtwerk.Recovered(p)
			}
		}()
		c, err := unbox[C](v)
		if err != nil {
			return nil, err
		}
		c, err = x.enrich(ctx, rec, c)
		if err != nil {
			return nil, err
		}
		return boxed[C]{c}, nil
	}
}

func (x *Stage[C, S]) poll(ctx context.Context, e configtopic.Entry[any], cursor []byte, found bool, p stage.Page) error {
	c, err := unbox[C](e.Config)
	if err != nil {
		return err
	}
	cfg := Config[C]{Record: e.Record, Config: c}
	var s S
	if found {
		var err error
		if s, err = x.codec.Decode(cursor); err != nil {
			return fmt.Errorf("decoding cursor: %w", err)
		}
	}
	return x.fn.Poll(ctx, cfg, s, &Emitter[S]{p: p, codec: x.codec, had: found})
}

// SuspendedHeader is the header of a config record that suspends the
// config (see Suspended).
const SuspendedHeader = "flechtwerk.suspended"

// Suspended reports whether a config record suspends its config: it has a
// header SuspendedHeader with value "true". A suspended config is live but
// not polled (Wake does not poll it either): its cursor stays, and a poll
// that runs when the record is read finishes. A new record of the key
// without the header (or with value "false") resumes it: it is polled at
// once if its interval passed, and continues from its cursor. The header
// works with any config codec; any other value of it is an error
// (*configtopic.RecordError naming the record) that ends Run. When the
// header appears more than once, the last one counts.
func Suspended(rec configtopic.Record) (bool, error) {
	susp := false
	for _, h := range rec.Headers {
		if h.Key != SuspendedHeader {
			continue
		}
		switch string(h.Value) {
		case "true":
			susp = true
		case "false":
			susp = false
		default:
			return false, &configtopic.RecordError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key,
				Err: fmt.Errorf("header %s is %q; want \"true\" or \"false\"", SuspendedHeader, h.Value)}
		}
	}
	return susp, nil
}
