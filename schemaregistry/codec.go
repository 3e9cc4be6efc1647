package schemaregistry

import (
	"context"
	"errors"
	"fmt"
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
// does not know, a schema of another type or one the codec's schema
// cannot read, a payload that does not decode or validate. It wraps
// flechtwerk.ErrInvalidRecord, so a transform that returns it rejects the
// record; an input codec's Decode error is an invalid record anyway. An
// error that reaches no registry does not match it (see Decode).
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
	references   []sr.SchemaReference
	timeout      time.Duration
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

// References declares schemas the codec's schema references (an Avro named
// type of another subject, a Protobuf import), registered under their own
// subjects. Default none.
func References(refs ...sr.SchemaReference) Opt {
	return optFunc(func(c *cfg) { c.references = append(c.references, refs...) })
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
	// registered schema; own is true for the codec's own schema id.
	reader(s sr.Schema, own bool) (func(payload []byte) (T, error), error)
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

	mu      sync.RWMutex
	id      int // 0 until Open
	readers map[int]func([]byte) (T, error)
}

func newCodec[T any](cl *sr.Client, topic string, schema sr.Schema, f format[T], opts []Opt) (*Codec[T], error) {
	c := cfg{autoRegister: true, timeout: 10 * time.Second}
	for _, o := range opts {
		o.apply(&c)
	}
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
	schema.References = c.references
	return &Codec[T]{cl: cl, subject: subject, cfg: c, schema: schema, f: f,
		readers: make(map[int]func([]byte) (T, error))}, nil
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
// the registry refuses (incompatible with the subject's versions, invalid,
// not registered for a lookup) fails with an error matching
// flechtwerk.ErrSchemaRefused; a registry that cannot be reached (or
// answers with a server error) fails with one matching
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
	rd, err := c.f.reader(c.schema, true)
	if err != nil { // the constructor parsed it already
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id = ss.ID
	c.readers[ss.ID] = rd
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
	if errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500 {
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
// fetched from the registry once and kept; Decode needs no Open. A value
// written with another schema of the subject is read with the codec's
// own (Avro schema resolution; Protobuf and JSON decode into T directly).
//
// Bytes that are not a value of the codec's format are an error matching
// ErrWireFormat (and flechtwerk.ErrInvalidRecord). A registry that cannot
// be reached while fetching an id is an error matching
// flechtwerk.ErrUnavailable instead: never an invalid record, it ends Run
// with the record not committed, whatever the InvalidRecords policy.
func (c *Codec[T]) Decode(b []byte) (T, error) {
	var zero T
	id, payload, err := new(sr.ConfluentHeader).DecodeID(b)
	if err != nil {
		if len(b) == 0 {
			return zero, fmt.Errorf("%w: empty value (a tombstone?) has no magic byte and schema id", ErrWireFormat)
		}
		return zero, fmt.Errorf("%w: no Confluent header (magic byte 0 and a 4-byte schema id) in %d bytes starting 0x%02x", ErrWireFormat, len(b), b[0])
	}
	if want := c.f.index(); want != nil {
		var idx []int
		// The bound keeps a forged count from allocating without limit
		// (protoc nests messages 100 deep at most).
		idx, payload, err = new(sr.ConfluentHeader).DecodeIndex(payload, maxIndexDepth)
		if err != nil {
			return zero, fmt.Errorf("%w: schema id %d: bad Protobuf message index (more than %d levels, or cut short): %v", ErrWireFormat, id, maxIndexDepth, err)
		}
		if id == c.ID() && !slices.Equal(idx, want) {
			return zero, fmt.Errorf("%w: schema id %d: message index %v is not the codec's message %v", ErrWireFormat, id, idx, want)
		}
	}
	rd, err := c.reader(id)
	if err != nil {
		return zero, err
	}
	v, err := rd(payload)
	if err != nil {
		return zero, fmt.Errorf("%w: schema id %d: %v", ErrWireFormat, id, err)
	}
	return v, nil
}

// reader returns the cached decoder of schema id, fetching it on a miss.
func (c *Codec[T]) reader(id int) (func([]byte) (T, error), error) {
	c.mu.RLock()
	rd, ok := c.readers[id]
	c.mu.RUnlock()
	if ok {
		return rd, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	s, err := c.cl.SchemaByID(ctx, id)
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode == 404 {
			return nil, fmt.Errorf("%w: schema id %d is not in the registry: %v", ErrWireFormat, id, err)
		}
		return nil, fmt.Errorf("schemaregistry: fetch schema id %d for subject %s: %w: %w", id, c.subject, flechtwerk.ErrUnavailable, err)
	}
	if s.Type != c.f.schemaType() {
		return nil, fmt.Errorf("%w: schema id %d is a %s schema, not %s", ErrWireFormat, id, s.Type, c.f.schemaType())
	}
	rd, err = c.f.reader(s, false)
	if err != nil {
		return nil, fmt.Errorf("%w: schema id %d: %v", ErrWireFormat, id, err)
	}
	c.mu.Lock()
	c.readers[id] = rd
	c.mu.Unlock()
	return rd, nil
}
