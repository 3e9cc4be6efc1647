package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"

	"github.com/flechtwerk/flechtwerk/transformer"
)

// SealOpt configures a Sealed codec.
type SealOpt interface{ applySeal(*codecCfg) }

// SignOpt configures a Signed codec.
type SignOpt interface{ applySign(*codecCfg) }

// CodecOpt configures either codec.
type CodecOpt interface {
	SealOpt
	SignOpt
}

type codecCfg struct {
	scope      string
	legacy     bool // ReadPlaintext / ReadUnsigned
	metrics    *Metrics
	logger     *slog.Logger
	legacyWarn string
}

type sealOpt func(*codecCfg)

func (o sealOpt) applySeal(c *codecCfg) { o(c) }

type signOpt func(*codecCfg)

func (o signOpt) applySign(c *codecCfg) { o(c) }

type bothOpt func(*codecCfg)

func (o bothOpt) applySeal(c *codecCfg) { o(c) }
func (o bothOpt) applySign(c *codecCfg) { o(c) }

// Scope binds the sealed values to scope: it is stamped into every token
// (flenc_scope), the scope's sealing key seals, and a token stamped with
// another scope is refused on read (CodeScope). Default: no scope, which
// refuses every scoped token. Adding a scope to a field is safe (unscoped
// tokens still open; Keyring.Reseal promotes them); dropping one is not.
func Scope(scope string) SealOpt { return sealOpt(func(c *codecCfg) { c.scope = scope }) }

// ReadPlaintext is the migration knob: a value that is not a flenc token
// is decoded by the inner codec as legacy plaintext (logged at Warn and
// counted) instead of failing with CodePlaintext. Default off. Turn it
// off again once every stored value is sealed: while on, a plaintext
// value pasted into the field is accepted.
func ReadPlaintext() SealOpt { return sealOpt(func(c *codecCfg) { c.legacy = true }) }

// ReadUnsigned is the migration knob of a Signed codec: a value that is
// not a flsig token is decoded by the inner codec (logged and counted)
// instead of failing with CodeUnsigned. Default off.
func ReadUnsigned() SignOpt { return signOpt(func(c *codecCfg) { c.legacy = true }) }

// WithMetrics counts the codec's seals, opens and failures on m. Default:
// none.
func WithMetrics(m *Metrics) CodecOpt { return bothOpt(func(c *codecCfg) { c.metrics = m }) }

// WithLogger sets the logger of the migration warnings (never a value or
// key). Default: discard.
func WithLogger(l *slog.Logger) CodecOpt { return bothOpt(func(c *codecCfg) { c.logger = l }) }

type sealed[T any] struct {
	k     *Keyring
	inner transformer.Codec[T]
	codecCfg
}

// Sealed returns a codec that stores inner's encoding sealed under k as
// a flenc:jwe: token. inner must encode to JSON (transformer.JSON, or
// Signed for sign-then-encrypt): the token's payload is that JSON, and
// the codec's own encoding is the token as a JSON string, so the codec
// serves a whole value (state, an output value, a config record) and a
// single JSON field alike, and its tokens are the ones flechtwerk's
// ENCRYPTED(inner, scope=...) writes and reads. Decode opens a token under
// the key its kid names (rotation: old keys keep opening) and refuses a
// plaintext value unless ReadPlaintext is set. Errors are *Error values.
func Sealed[T any](k *Keyring, inner transformer.Codec[T], opts ...SealOpt) transformer.Codec[T] {
	c := &sealed[T]{k: k, inner: inner}
	for _, o := range opts {
		o.applySeal(&c.codecCfg)
	}
	c.legacyWarn = "secret value read as legacy plaintext: re-write the record sealed"
	return c
}

func (c *sealed[T]) Encode(v T) ([]byte, error) {
	p, err := c.inner.Encode(v)
	if err != nil {
		return nil, err
	}
	if !json.Valid(p) {
		c.metrics.failed("seal", CodeMalformed)
		return nil, newErr(CodeMalformed, "seal", "", c.scope, "the inner codec did not encode JSON")
	}
	tok, err := c.k.Seal(p, c.scope)
	if err != nil {
		c.metrics.failed("seal", codeOf(err))
		return nil, err
	}
	c.metrics.sealed()
	return quoted(tok), nil
}

func (c *sealed[T]) Decode(b []byte) (T, error) {
	var zero T
	tok, ok := tokenIn(b, sealScheme)
	if !ok {
		if !c.legacy {
			c.metrics.failed("open", CodePlaintext)
			return zero, newErr(CodePlaintext, "open", "", c.scope, "the value is not a flenc token and ReadPlaintext is off")
		}
		c.metrics.legacy("open")
		c.warn()
		return c.inner.Decode(b)
	}
	p, err := c.k.Open(tok, c.scope)
	if err != nil {
		c.metrics.failed("open", codeOf(err))
		return zero, err
	}
	c.metrics.opened()
	return c.inner.Decode(p)
}

type signed[T any] struct {
	k     *Keyring
	inner transformer.Codec[T]
	codecCfg
}

// Signed returns a codec that stores inner's encoding signed by k's
// signing key for scope as a flsig:jws: token (a JSON string, like
// Sealed's). scope is required: a signature vouches for exactly one
// scope, and Decode accepts it only for that scope, from any signing key
// of k bound to it. Sign-then-encrypt is the recommended composition:
// Sealed(k, Signed(k, inner, s), Scope(s)).
func Signed[T any](k *Keyring, inner transformer.Codec[T], scope string, opts ...SignOpt) transformer.Codec[T] {
	c := &signed[T]{k: k, inner: inner}
	for _, o := range opts {
		o.applySign(&c.codecCfg)
	}
	c.scope = scope
	c.legacyWarn = "value read unsigned: re-write the record signed"
	return c
}

func (c *signed[T]) Encode(v T) ([]byte, error) {
	p, err := c.inner.Encode(v)
	if err != nil {
		return nil, err
	}
	if !json.Valid(p) {
		c.metrics.failed("sign", CodeMalformed)
		return nil, newErr(CodeMalformed, "sign", "", c.scope, "the inner codec did not encode JSON")
	}
	tok, err := c.k.Sign(p, c.scope)
	if err != nil {
		c.metrics.failed("sign", codeOf(err))
		return nil, err
	}
	c.metrics.signed()
	return quoted(tok), nil
}

func (c *signed[T]) Decode(b []byte) (T, error) {
	var zero T
	tok, ok := tokenIn(b, signScheme)
	if !ok {
		if !c.legacy {
			c.metrics.failed("verify", CodeUnsigned)
			return zero, newErr(CodeUnsigned, "verify", "", c.scope, "the value is not a flsig token and ReadUnsigned is off")
		}
		c.metrics.legacy("verify")
		c.warn()
		return c.inner.Decode(b)
	}
	p, err := c.k.Verify(tok, c.scope)
	if err != nil {
		c.metrics.failed("verify", codeOf(err))
		return zero, err
	}
	c.metrics.verified()
	return c.inner.Decode(p)
}

func (c *codecCfg) warn() {
	if c.logger != nil {
		c.logger.LogAttrs(context.Background(), slog.LevelWarn, c.legacyWarn, slog.String("scope", c.scope))
	}
}

// quoted returns tok as a JSON string: a token is base64url, dots and
// colons, nothing to escape.
func quoted(tok string) []byte {
	b := make([]byte, 0, len(tok)+2)
	b = append(b, '"')
	b = append(b, tok...)
	return append(b, '"')
}

// tokenIn returns the token of a JSON string under scheme.
func tokenIn(b []byte, scheme string) (string, bool) {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '"' || !bytes.HasPrefix(b[1:], []byte(scheme)) {
		return "", false
	}
	var s string
	if json.Unmarshal(b, &s) != nil {
		return "", false
	}
	return s, true
}

func codeOf(err error) Code {
	if e, ok := err.(*Error); ok {
		return e.Code
	}
	return ""
}
