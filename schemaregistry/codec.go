package schemaregistry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/flechtwerk/flechtwerk"
)

// ErrNotOpen is returned by Encode before Open (or after Close): the
// codec's schema id is known only once Open registered or looked up its
// schema.
var ErrNotOpen = errors.New("schemaregistry: Encode before Open: the codec's schema is not registered yet")

// ErrWireFormat matches every error of Decode that says the bytes are not
// a value of the codec's format: no magic byte, a schema id the registry
// says it does not have (error code 40403), a schema of another type or
// one the codec's schema cannot read, a payload that does not decode or
// validate. It wraps flechtwerk.ErrInvalidRecord, so a transform that
// returns it rejects the record; an input codec's Decode error is an
// invalid record anyway. A failure to fetch a schema does not match it
// (see Decode).
var ErrWireFormat = fmt.Errorf("schemaregistry: not the codec's wire format: %w", flechtwerk.ErrInvalidRecord)

// Opt configures a codec.
type Opt interface{ apply(*cfg) }

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

type cfg struct {
	key          bool
	subject      string
	autoRegister bool
	normalize    bool
	references   []reference
	timeout      time.Duration
}

// reference is a schema reference of the codec's own schema and, when
// given (Reference), the referenced schema's text.
type reference struct {
	ref  sr.SchemaReference
	text string
}

// Key makes the codec one for record keys: its subject is "<topic>-key"
// (TopicNameStrategy) instead of "<topic>-value".
func Key() Opt { return optFunc(func(c *cfg) { c.key = true }) }

// Subject sets the subject the schema is registered under, instead of the
// TopicNameStrategy subject ("<topic>-value", or "<topic>-key" with Key).
func Subject(name string) Opt { return optFunc(func(c *cfg) { c.subject = name }) }

// AutoRegister sets whether Open registers the schema under the subject
// (true, the default: a schema already registered keeps its id) or only
// looks it up (false: Open fails with flechtwerk.CodeSchemaRefused unless
// the schema is registered). Confluent's serializers call it
// auto.register.schemas.
func AutoRegister(on bool) Opt { return optFunc(func(c *cfg) { c.autoRegister = on }) }

// Normalize asks the registry to normalize the schema before it registers
// or looks it up (Confluent's normalize.schemas). Default off.
func Normalize() Opt { return optFunc(func(c *cfg) { c.normalize = true }) }

// References declares schemas the codec's schema references (a Protobuf
// import, a JSON Schema $ref), registered under their own subjects: Open
// registers the schema with them. Default none. An Avro schema that uses
// a named type of a referenced schema needs that schema's text to parse:
// declare it with Reference instead.
func References(refs ...sr.SchemaReference) Opt {
	return optFunc(func(c *cfg) {
		for _, r := range refs {
			c.references = append(c.references, reference{ref: r})
		}
	})
}

// Reference declares one schema the codec's schema references, as
// References does, together with its text (the schema registered as
// version ref.Version of subject ref.Subject), which the Avro constructor
// parses before the codec's schema. A referenced schema that references
// others needs them declared too, before it: the constructor parses the
// referenced schemas in the order given. Open registers the codec's
// schema with all of them as its references.
func Reference(ref sr.SchemaReference, schema string) Opt {
	return optFunc(func(c *cfg) { c.references = append(c.references, reference{ref: ref, text: schema}) })
}

// RequestTimeout bounds each registry request of Open and of Decode (which
// fetches a schema id it has not seen). Default 10s.
func RequestTimeout(d time.Duration) Opt { return optFunc(func(c *cfg) { c.timeout = d }) }

// format is what differs between Avro, Protobuf and JSON Schema.
type format[T any] interface {
	schemaType() sr.SchemaType
	// index is the Protobuf message index written after the id (nil for
	// the other formats).
	index() []int
	encode(T) ([]byte, error)
	// reader returns the decoder of values written with the given
	// registered schema; own is true for the codec's own schema. refs
	// are the texts of the schemas s references, directly or not, in
	// dependency order (a schema after those it references); nil unless
	// usesRefs.
	reader(s sr.Schema, own bool, refs []string) (func(payload []byte) (T, error), error)
	// usesRefs reports whether reader needs the referenced schemas of a
	// writer schema.
	usesRefs() bool
}

// Codec encodes and decodes values of T in the Confluent wire format: a
// zero byte, the schema id (4 bytes, big endian), for Protobuf the message
// index, then the value in the schema's format. It implements
// transformer.Codec[T] (for an input, an output or a state) and
// flechtwerk.Lifecycle: Open registers (or looks up) the codec's schema
// under its subject, and only then can Encode run.
//
// Encode and Decode are safe for concurrent use; Open and Close must not
// run concurrently with them.
type Codec[T any] struct {
	cl      *sr.Client
	subject string
	cfg     cfg
	schema  sr.Schema
	f       format[T]

	mu       sync.RWMutex
	id       int // 0 until Open
	readers  map[int]reader[T]
	fetching map[int]*fetch[T]    // schema ids being fetched
	absent   map[int]absence      // schema ids the registry does not have
	refTexts map[refKey]sr.Schema // referenced schemas, by subject and version
	now      func() time.Time
}

// reader decodes the values of one schema id.
type reader[T any] struct {
	read func([]byte) (T, error)
	// own is true for the codec's own schema: a Protobuf message index
	// must then be the codec's.
	own bool
	// err, when not nil, is the error of every value of the schema id
	// (a schema of another type, or one the codec cannot read): the
	// registry never changes the schema of an id.
	err error
}

// fetch is a fetch of a schema id in flight: the decodes that need the id
// meanwhile wait for done and share its result.
type fetch[T any] struct {
	done chan struct{}
	rd   reader[T]
	err  error
}

// absence is the registry's answer that a schema id does not exist, kept
// until until.
type absence struct {
	until time.Time
	err   error
}

type refKey struct {
	subject string
	version int
}

const (
	// absentFor is how long Decode takes a schema id the registry
	// answered "schema not found" for as absent without asking again.
	absentFor = 5 * time.Second
	// maxAbsent bounds the number of absent ids kept.
	maxAbsent = 1024
	// maxRefDepth bounds the nesting of schema references.
	maxRefDepth = 32
)

func newCodec[T any](cl *sr.Client, topic string, schema sr.Schema, f format[T], c cfg) (*Codec[T], error) {
	var errs []error
	if cl == nil {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "client", "the schema registry client is nil"))
	}
	subject := c.subject
	if subject == "" {
		if topic == "" {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "topic", "no topic and no Subject: the codec has no subject"))
		}
		subject = topic + "-value"
		if c.key {
			subject = topic + "-key"
		}
	}
	if c.timeout <= 0 {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "RequestTimeout", "%v is not positive", c.timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, r := range c.references {
		schema.References = append(schema.References, r.ref)
	}
	return &Codec[T]{cl: cl, subject: subject, cfg: c, schema: schema, f: f,
		readers: make(map[int]reader[T]), fetching: make(map[int]*fetch[T]),
		absent: make(map[int]absence), refTexts: make(map[refKey]sr.Schema), now: time.Now}, nil
}

// newOpts applies opts over the defaults.
func newOpts(opts []Opt) cfg {
	c := cfg{autoRegister: true, timeout: 10 * time.Second}
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

// Subject returns the subject the codec's schema is registered under.
func (c *Codec[T]) Subject() string { return c.subject }

// ID returns the codec's schema id, 0 before Open.
func (c *Codec[T]) ID() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.id
}

// Open registers the codec's schema under its subject (or, with
// AutoRegister(false), looks it up) and keeps its id for Encode. A schema
// or request the registry refuses (a 4xx: incompatible with the subject's
// versions, invalid, not registered for a lookup, not authorized) fails
// with an error matching flechtwerk.ErrSchemaRefused, not to be retried;
// a registry that cannot be reached, times out or answers 408, 429 or a
// server error fails with one matching
// flechtwerk.ErrSchemaRegistryUnavailable, which is safe to retry. Both
// name the subject and keep the registry's *sr.ResponseError (or the
// transport's error) in the chain.
func (c *Codec[T]) Open(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	if c.cfg.normalize {
		ctx = sr.WithParams(ctx, sr.Normalize)
	}
	var (
		ss  sr.SubjectSchema
		err error
		op  = "register"
	)
	if c.cfg.autoRegister {
		ss, err = c.cl.CreateSchema(ctx, c.subject, c.schema)
	} else {
		op = "look up"
		ss, err = c.cl.LookupSchema(ctx, c.subject, c.schema)
	}
	if err != nil {
		return c.openError(op, err)
	}
	rd, err := c.f.reader(c.schema, true, nil)
	if err != nil { // the constructor parsed it already
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id = ss.ID
	c.readers[ss.ID] = reader[T]{read: rd, own: true}
	delete(c.absent, ss.ID)
	return nil
}

// Close forgets the schema id: Encode fails until the next Open. The
// client is the caller's and stays open. A second Close is a no-op.
func (c *Codec[T]) Close(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id = 0
	return nil
}

// openError classifies a failed registration or lookup.
func (c *Codec[T]) openError(op string, err error) error {
	code := flechtwerk.CodeSchemaRegistryUnavailable
	what := fmt.Sprintf("cannot %s the %s schema: registry unavailable", op, c.f.schemaType())
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500 &&
		re.StatusCode != http.StatusRequestTimeout && re.StatusCode != http.StatusTooManyRequests {
		code = flechtwerk.CodeSchemaRefused
		what = fmt.Sprintf("the registry refused to %s the %s schema (HTTP %d, error code %d)", op, c.f.schemaType(), re.StatusCode, re.ErrorCode)
	}
	return &openError{cfg: flechtwerk.Errorf(code, "subject "+c.subject, "%s: %v", what, err), cause: err}
}

type openError struct {
	cfg   *flechtwerk.ConfigError
	cause error
}

func (e *openError) Error() string   { return e.cfg.Error() }
func (e *openError) Unwrap() []error { return []error{e.cfg, e.cause} }

// Encode returns v in the wire format under the codec's schema id; before
// Open it returns ErrNotOpen. A value the schema does not admit is an
// error that names the subject.
func (c *Codec[T]) Encode(v T) ([]byte, error) {
	id := c.ID()
	if id == 0 {
		return nil, fmt.Errorf("%w (subject %s)", ErrNotOpen, c.subject)
	}
	payload, err := c.f.encode(v)
	if err != nil {
		return nil, fmt.Errorf("schemaregistry: encode for subject %s: %w", c.subject, err)
	}
	b, _ := new(sr.ConfluentHeader).AppendEncode(make([]byte, 0, 5+8+len(payload)), id, c.f.index())
	return append(b, payload...), nil
}

// maxIndexDepth bounds the length of a Protobuf message index.
const maxIndexDepth = 100

// Decode reads a value in the wire format. A schema id it has not seen is
// fetched from the registry once and kept (concurrent decodes of the id
// wait for one fetch); Decode needs no Open. A value written with another
// schema of the subject is read with the codec's own (Avro schema
// resolution; Protobuf and JSON decode into T directly). For the codec's
// own schema (its id, or a schema of the same text and references), a
// Protobuf message index must be T's.
//
// Bytes that are not a value of the codec's format are an error matching
// ErrWireFormat (and flechtwerk.ErrInvalidRecord); a schema id is proven
// absent only by the registry's "schema not found" (error code 40403),
// and Decode takes it as absent for a few seconds without asking again.
// Any other failure to fetch a schema id or the schemas it references
// (no answer, a timeout, another 4xx or 404, a 5xx) is an error matching
// flechtwerk.ErrUnavailable instead: never an invalid record, it ends Run
// with the record not committed, whatever the InvalidRecords policy, and
// the next Decode asks the registry again.
func (c *Codec[T]) Decode(b []byte) (T, error) {
	var zero T
	id, payload, err := new(sr.ConfluentHeader).DecodeID(b)
	if err != nil {
		if len(b) == 0 {
			return zero, fmt.Errorf("%w: empty value (a tombstone?) has no magic byte and schema id", ErrWireFormat)
		}
		return zero, fmt.Errorf("%w: no Confluent header (magic byte 0 and a 4-byte schema id) in %d bytes starting 0x%02x", ErrWireFormat, len(b), b[0])
	}
	var idx []int
	want := c.f.index()
	if want != nil {
		// The bound keeps a forged count from allocating without limit
		// (protoc nests messages 100 deep at most).
		idx, payload, err = new(sr.ConfluentHeader).DecodeIndex(payload, maxIndexDepth)
		if err != nil {
			return zero, fmt.Errorf("%w: schema id %d: bad Protobuf message index (more than %d levels, or cut short): %v", ErrWireFormat, id, maxIndexDepth, err)
		}
	}
	rd, err := c.reader(id)
	if err != nil {
		return zero, err
	}
	if rd.err != nil {
		return zero, rd.err
	}
	if want != nil && rd.own && !slices.Equal(idx, want) {
		return zero, fmt.Errorf("%w: schema id %d: message index %v is not the codec's message %v", ErrWireFormat, id, idx, want)
	}
	v, err := rd.read(payload)
	if err != nil {
		return zero, fmt.Errorf("%w: schema id %d: %v", ErrWireFormat, id, err)
	}
	return v, nil
}

// reader returns the decoder of schema id: cached, or fetched by one
// caller while the others wait for it.
func (c *Codec[T]) reader(id int) (reader[T], error) {
	c.mu.RLock()
	rd, ok := c.readers[id]
	c.mu.RUnlock()
	if ok {
		return rd, nil
	}
	c.mu.Lock()
	if rd, ok := c.readers[id]; ok {
		c.mu.Unlock()
		return rd, nil
	}
	if a, ok := c.absent[id]; ok {
		if c.now().Before(a.until) {
			c.mu.Unlock()
			return reader[T]{}, a.err
		}
		delete(c.absent, id)
	}
	if f, ok := c.fetching[id]; ok {
		c.mu.Unlock()
		<-f.done
		return f.rd, f.err
	}
	f := &fetch[T]{done: make(chan struct{}), err: fmt.Errorf("schemaregistry: fetch schema id %d for subject %s: %w: the fetch panicked", id, c.subject, flechtwerk.ErrUnavailable)}
	c.fetching[id] = f
	c.mu.Unlock()
	var absent bool
	defer func() {
		c.mu.Lock()
		delete(c.fetching, id)
		switch {
		case f.err == nil:
			if _, ok := c.readers[id]; !ok { // Open's own reader stays
				c.readers[id] = f.rd
			}
		case absent:
			c.markAbsent(id, f.err)
		}
		c.mu.Unlock()
		close(f.done)
	}()
	f.rd, absent, f.err = c.fetch(id)
	return f.rd, f.err
}

// markAbsent keeps id as absent for absentFor; c.mu is held.
func (c *Codec[T]) markAbsent(id int, err error) {
	now := c.now()
	if len(c.absent) >= maxAbsent {
		for k, a := range c.absent {
			if !now.Before(a.until) {
				delete(c.absent, k)
			}
		}
		if len(c.absent) >= maxAbsent {
			return
		}
	}
	c.absent[id] = absence{until: now.Add(absentFor), err: err}
}

// fetch fetches schema id and what it references, and builds its reader;
// absent is true when the registry answered that the id does not exist.
func (c *Codec[T]) fetch(id int) (rd reader[T], absent bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	s, err := c.cl.SchemaByID(ctx, id)
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.ErrorCode == sr.ErrSchemaNotFound.Code {
			return rd, true, fmt.Errorf("%w: schema id %d is not in the registry: %w", ErrWireFormat, id, err)
		}
		return rd, false, c.unavailable(fmt.Sprintf("schema id %d", id), err)
	}
	if s.Type != c.f.schemaType() {
		return reader[T]{err: fmt.Errorf("%w: schema id %d is a %s schema, not %s", ErrWireFormat, id, s.Type, c.f.schemaType())}, false, nil
	}
	var refs []string
	if c.f.usesRefs() && len(s.References) > 0 {
		if refs, err = c.references(ctx, s.References); err != nil {
			err = fmt.Errorf("schemaregistry: schema id %d: %w", id, err)
			if errors.Is(err, ErrWireFormat) {
				return reader[T]{err: err}, false, nil
			}
			return rd, false, err
		}
	}
	own := s.Schema == c.schema.Schema && slices.Equal(s.References, c.schema.References)
	read, err := c.f.reader(s, own, refs)
	if err != nil {
		return reader[T]{err: fmt.Errorf("%w: schema id %d: %v", ErrWireFormat, id, err)}, false, nil
	}
	return reader[T]{read: read, own: own}, false, nil
}

// unavailable is the error of a failed fetch of what.
func (c *Codec[T]) unavailable(what string, err error) error {
	return fmt.Errorf("schemaregistry: fetch %s for subject %s: %w: %w", what, c.subject, flechtwerk.ErrUnavailable, err)
}

// references returns the texts of the schemas refs name and of those they
// reference in turn, fetched by subject and version (and kept), in
// dependency order: each after the schemas it references. A reference the
// registry does not have is an inconsistent registry, not a bad record:
// its error matches flechtwerk.ErrUnavailable.
func (c *Codec[T]) references(ctx context.Context, refs []sr.SchemaReference) ([]string, error) {
	var out []string
	seen := make(map[refKey]bool)
	var walk func(refs []sr.SchemaReference, depth int) error
	walk = func(refs []sr.SchemaReference, depth int) error {
		if depth > maxRefDepth {
			return fmt.Errorf("%w: references nested deeper than %d", ErrWireFormat, maxRefDepth)
		}
		for _, r := range refs {
			k := refKey{r.Subject, r.Version}
			if seen[k] {
				continue
			}
			seen[k] = true
			s, err := c.referenced(ctx, k)
			if err != nil {
				return err
			}
			if err := walk(s.References, depth+1); err != nil {
				return err
			}
			out = append(out, s.Schema)
		}
		return nil
	}
	return out, walk(refs, 0)
}

// referenced returns the schema registered as version k.version of
// subject k.subject, fetched once.
func (c *Codec[T]) referenced(ctx context.Context, k refKey) (sr.Schema, error) {
	c.mu.RLock()
	s, ok := c.refTexts[k]
	c.mu.RUnlock()
	if ok {
		return s, nil
	}
	ss, err := c.cl.SchemaByVersion(ctx, k.subject, k.version)
	if err != nil {
		return sr.Schema{}, c.unavailable(fmt.Sprintf("referenced schema %s version %d", k.subject, k.version), err)
	}
	if k.version > 0 { // a fixed version does not change
		c.mu.Lock()
		c.refTexts[k] = ss.Schema
		c.mu.Unlock()
	}
	return ss.Schema, nil
}
