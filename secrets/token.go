package secrets

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwe"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// The token prefixes: a sealed value is "flenc:jwe:" and an RFC 7516
// compact JWE, a signed value "flsig:jws:" and an RFC 7515 compact JWS.
const (
	SealPrefix = sealScheme + "jwe:"
	SignPrefix = signScheme + "jws:"
)

const (
	sealScheme = "flenc:" // any value under this scheme is ciphertext-form
	signScheme = "flsig:" // any value under this scheme is signed-form

	algDir       = "dir"
	algRecipient = "ECDH-ES+A256KW"
	algSign      = "Ed25519" // RFC 9864, fully specified: never "EdDSA"
	encA256GCM   = "A256GCM"
	scopeHeader  = "flenc_scope"
)

// The protected-header members a reader admits (the registered JOSE
// header parameters plus flenc_scope), as the reference implementation's
// strict header registries do. ECDH-ES adds epk, apu and apv.
var (
	jwsMembers       = []string{"alg", "jku", "jwk", "kid", "x5u", "x5c", "x5t", "x5t#S256", "typ", "cty", "crit", "b64", scopeHeader}
	jweMembers       = append(slices.Clone(jwsMembers), "enc", "zip")
	recipientMembers = append(slices.Clone(jweMembers), "epk", "apu", "apv")
)

// IsSealed reports whether v is ciphertext-form: a value under the flenc:
// scheme. Classification is by scheme; the envelope is checked on open.
func IsSealed(v []byte) bool { return bytes.HasPrefix(v, []byte(sealScheme)) }

// IsSigned reports whether v is signed-form: a value under the flsig:
// scheme.
func IsSigned(v []byte) bool { return bytes.HasPrefix(v, []byte(signScheme)) }

// compactOf strips scheme and envelope from token and returns the compact
// serialization.
func compactOf(op, token, scheme, envelope string) (string, error) {
	if !strings.HasPrefix(token, scheme) {
		return "", newErr(CodeMalformed, op, "", "", "not a %s token", strings.TrimSuffix(scheme, ":"))
	}
	env, compact, ok := strings.Cut(token[len(scheme):], ":")
	if !ok || env != envelope || compact == "" {
		return "", newErr(CodeMalformed, op, "", "", "unknown %s envelope, expected %q", strings.TrimSuffix(scheme, ":"), envelope)
	}
	return compact, nil
}

// header is a token's protected header, decoded without a key: not
// authenticated until the token opened or verified.
type header struct {
	raw   map[string]json.RawMessage
	kid   string
	scope *string
}

func readHeader(op, compact string) (*header, error) {
	seg, _, _ := strings.Cut(compact, ".")
	b, err := decodeB64(seg)
	if err != nil {
		return nil, newErr(CodeMalformed, op, "", "", "the header is not base64url")
	}
	h := &header{}
	if err := json.Unmarshal(b, &h.raw); err != nil || h.raw == nil {
		return nil, newErr(CodeMalformed, op, "", "", "the header is not a JSON object")
	}
	if err := json.Unmarshal(h.raw["kid"], &h.kid); err != nil || h.kid == "" {
		return nil, newErr(CodeMalformed, op, "", "", "the header carries no usable kid")
	}
	if rs, ok := h.raw[scopeHeader]; ok {
		var s string
		if err := json.Unmarshal(rs, &s); err != nil || isNull(rs) {
			return nil, newErr(CodeMalformed, op, h.kid, "", "flenc_scope in the header is not a string")
		}
		h.scope = &s
	}
	return h, nil
}

// check admits the header for a key whose kind allows exactly alg (and
// enc for a JWE): the kind of the key behind the kid decides, never the
// token.
func (h *header) check(op, alg, enc string, members []string) error {
	str := func(name string) (string, bool) {
		var s string
		err := json.Unmarshal(h.raw[name], &s)
		return s, err == nil && !isNull(h.raw[name])
	}
	got, ok := str("alg")
	if !ok {
		return newErr(CodeMalformed, op, h.kid, "", "the header has no alg")
	}
	if got != alg {
		return newErr(CodeAlgorithm, op, h.kid, "", "alg %q is not allowed for this key (only %q)", printable(got), alg)
	}
	if enc != "" {
		got, ok := str("enc")
		if !ok {
			return newErr(CodeMalformed, op, h.kid, "", "the header has no enc")
		}
		if got != enc {
			return newErr(CodeAlgorithm, op, h.kid, "", "enc %q is not allowed for this key (only %q)", printable(got), enc)
		}
		if _, ok := h.raw["zip"]; ok {
			return newErr(CodeAlgorithm, op, h.kid, "", "compression (zip) is not allowed")
		}
	}
	for _, name := range sortedKeys(h.raw) {
		if !slices.Contains(members, name) {
			return newErr(CodeMalformed, op, h.kid, "", "header member %q is not admitted", printable(name))
		}
	}
	if rc, ok := h.raw["crit"]; ok {
		var crit []string
		if err := json.Unmarshal(rc, &crit); err != nil {
			return newErr(CodeMalformed, op, h.kid, "", "crit is not an array of strings")
		}
		for _, name := range crit {
			if _, ok := h.raw[name]; !ok || !slices.Contains(members, name) {
				return newErr(CodeMalformed, op, h.kid, "", "crit names %q, which is missing or not admitted", printable(name))
			}
		}
	}
	if rb, ok := h.raw["b64"]; ok && string(bytes.TrimSpace(rb)) != "true" {
		return newErr(CodeMalformed, op, h.kid, "", "an unencoded payload (b64) is not admitted")
	}
	if slices.Contains(members, "epk") {
		if _, ok := h.raw["epk"]; !ok {
			return newErr(CodeMalformed, op, h.kid, "", "the header has no epk")
		}
	}
	return nil
}

// The size limits of the reference reader (joserfc's registries), on
// the base64url parts of a compact serialization.
var (
	jweLimits = []int{1024, 1024, 64, 65536, 64} // header, encrypted key, IV, ciphertext, tag
	jwsLimits = []int{512, 128000, 1024}         // header, payload, signature
	jweNames  = []string{"protected header", "encrypted key", "IV", "ciphertext", "tag"}
	jwsNames  = []string{"header", "payload", "signature"}
)

// sizes refuses a compact serialization whose parts exceed the limits.
func sizes(op, kid, scope, compact string, jwe bool) error {
	limits, names := jwsLimits, jwsNames
	if jwe {
		limits, names = jweLimits, jweNames
	}
	total := 0
	for _, l := range limits {
		total += l
	}
	if len(compact) > total {
		return newErr(CodeTooLarge, op, kid, scope, "the token is larger than the format admits (%d bytes)", total)
	}
	for i, part := range strings.SplitN(compact, ".", len(limits)) {
		if len(part) > limits[i] {
			return newErr(CodeTooLarge, op, kid, scope, "the %s is larger than the format admits (%d bytes base64url)", names[i], limits[i])
		}
	}
	return nil
}

// segments checks the compact serialization's shape: n base64url parts;
// for a JWE a 12-byte IV, a 16-byte tag, and an encrypted key that is
// empty under dir and 40 bytes (a wrapped AES-256 key) otherwise.
func segments(op, kid, compact string, n int, dir bool) error {
	parts := strings.Split(compact, ".")
	if len(parts) != n {
		return newErr(CodeMalformed, op, kid, "", "a compact %s has %d parts, not %d", map[int]string{3: "JWS", 5: "JWE"}[n], n, len(parts))
	}
	lens := make([]int, n)
	for i, p := range parts {
		b, err := decodeB64(p)
		if err != nil || strings.ContainsAny(p, "=+/") {
			return newErr(CodeMalformed, op, kid, "", "part %d is not base64url", i+1)
		}
		lens[i] = len(b)
	}
	if n == 5 {
		switch {
		case dir && lens[1] != 0:
			return newErr(CodeMalformed, op, kid, "", "a dir token carries an encrypted key")
		case !dir && lens[1] != 40:
			return newErr(CodeMalformed, op, kid, "", "the encrypted key is not a wrapped 32-byte key")
		case lens[2] != 12 || lens[4] != 16:
			return newErr(CodeMalformed, op, kid, "", "the IV or tag has the wrong length")
		}
	}
	return nil
}

// Seal encrypts payload under the sealing key for scope
// (primaries[scope], else the primary) and returns the flenc:jwe: token.
// An oct key seals dir+A256GCM, an X25519 key ECDH-ES+A256KW+A256GCM to
// its public half. A non-empty scope is stamped into the protected header
// (flenc_scope). A key bound to scopes refuses any other: CodeScope.
func (k *Keyring) Seal(payload []byte, scope string) (string, error) {
	if k == nil {
		return "", errNoKeyring("seal")
	}
	kid, err := k.SealingKid(scope)
	if err != nil {
		return "", err
	}
	h := jwe.NewHeaders()
	if err := h.Set("kid", kid); err != nil {
		return "", newErr(CodeMalformed, "seal", kid, scope, "kid does not fit a header")
	}
	if scope != "" {
		if err := h.Set(scopeHeader, scope); err != nil {
			return "", newErr(CodeMalformed, "seal", kid, scope, "scope does not fit a header")
		}
	}
	var key jwe.EncryptDecryptOption
	if p := k.recipients[kid]; p != nil {
		if p.mismatch {
			return "", newErr(CodeKeyring, "seal", kid, scope, "the X25519 private half does not match its public half")
		}
		key = jwe.WithKey(jwa.ECDH_ES_A256KW(), p.ecdhPub)
	} else {
		key = jwe.WithKey(jwa.DIRECT(), k.oct[kid])
	}
	if len(payload) > 3*jweLimits[3]/4 {
		return "", newErr(CodeTooLarge, "seal", kid, scope, "the value is larger than a token admits (%d bytes)", 3*jweLimits[3]/4)
	}
	out, err := jwe.Encrypt(payload, key, jwe.WithContentEncryption(jwa.A256GCM()), jwe.WithProtectedHeaders(h), jwe.WithCompact())
	if err != nil {
		return "", newErr(CodeKeyring, "seal", kid, scope, "encryption failed")
	}
	if err := sizes("seal", kid, scope, string(out), true); err != nil {
		return "", err
	}
	return SealPrefix + string(out), nil
}

// Open decrypts a flenc:jwe: token to its payload for a reader of scope.
//
// The key is the one the token's kid names; its kind fixes the only
// (alg, enc) pair admitted. Scope rules: a scoped reader refuses a token
// stamped with another scope (relocation) and accepts an unscoped one (a
// scope can be added to a field, then swept in with Reseal); an unscoped
// reader refuses a scoped token (a scope cannot be dropped); a key bound
// to scopes refuses a token whose stamped scope (or none) is outside its
// binding. Errors: CodeMalformed, CodeUnknownKid, CodeNoPrivateKey,
// CodeAlgorithm, CodeAuthentication, CodeScope.
func (k *Keyring) Open(token string, scope string) ([]byte, error) {
	const op = "open"
	if k == nil {
		return nil, errNoKeyring(op)
	}
	compact, err := compactOf(op, token, sealScheme, "jwe")
	if err != nil {
		return nil, err
	}
	h, err := readHeader(op, compact)
	if err != nil {
		return nil, err
	}
	kid := h.kid
	var key jwe.EncryptDecryptOption
	var alg string
	var members []string
	if p := k.recipients[kid]; p != nil {
		if p.private == nil {
			return nil, newErr(CodeNoPrivateKey, op, kid, scope, "the keyring holds only the public half: it can seal but not open")
		}
		if p.mismatch {
			return nil, newErr(CodeKeyring, op, kid, scope, "the X25519 private half does not match its public half")
		}
		key, alg, members = jwe.WithKey(jwa.ECDH_ES_A256KW(), p.ecdhPriv), algRecipient, recipientMembers
	} else if oct := k.oct[kid]; oct != nil {
		key, alg, members = jwe.WithKey(jwa.DIRECT(), oct), algDir, jweMembers
	} else {
		return nil, newErr(CodeUnknownKid, op, kid, scope, "no such key in the keyring")
	}
	if err := sizes(op, kid, scope, compact, true); err != nil {
		return nil, err
	}
	if err := h.check(op, alg, encA256GCM, members); err != nil {
		return nil, withScope(err, scope)
	}
	if err := segments(op, kid, compact, 5, alg == algDir); err != nil {
		return nil, withScope(err, scope)
	}
	payload, err := jwe.Decrypt([]byte(compact), key)
	if err != nil {
		return nil, newErr(CodeAuthentication, op, kid, scope, "the token does not authenticate under this key")
	}
	// The header is authenticated now (it is the AEAD's associated data).
	switch {
	case scope != "" && h.scope != nil && *h.scope != scope:
		return nil, newErr(CodeScope, op, kid, scope, "scope mismatch: the token is scoped %q", printable(*h.scope))
	case scope == "" && h.scope != nil:
		return nil, newErr(CodeScope, op, kid, scope, "the token is scoped %q but the reader declares no scope (downgrade refused)", printable(*h.scope))
	}
	if bound, ok := k.scopes[kid]; ok && (h.scope == nil || !slices.Contains(bound, *h.scope)) {
		return nil, newErr(CodeScope, op, kid, scope, "the key is bound to scopes %q; the token is stamped %s", bound, stamped(h.scope))
	}
	return payload, nil
}

func stamped(s *string) string {
	if s == nil {
		return "with no scope"
	}
	return "with " + quote(printable(*s))
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func withScope(err error, scope string) error {
	if e, ok := err.(*Error); ok && e.Scope == "" {
		e.Scope = printable(scope)
	}
	return err
}

// Reseal opens token for scope and seals its payload again under the
// scope's current sealing key: the step of a rotation sweep, and the way
// to promote an unscoped token to scope. The payload bytes are kept as
// they are.
func (k *Keyring) Reseal(token string, scope string) (string, error) {
	payload, err := k.Open(token, scope)
	if err != nil {
		return "", err
	}
	return k.Seal(payload, scope)
}

// Sign signs payload with the signing key for scope (signing[scope]) and
// returns the flsig:jws: token (alg Ed25519, flenc_scope in the protected
// header). scope is required: a signature names the compartment it vouches
// for.
func (k *Keyring) Sign(payload []byte, scope string) (string, error) {
	const op = "sign"
	if k == nil {
		return "", errNoKeyring(op)
	}
	if scope == "" {
		return "", newErr(CodeScope, op, "", "", "signing needs a non-empty scope")
	}
	kid, err := k.SigningKid(scope)
	if err != nil {
		return "", err
	}
	p := k.signers[kid]
	if p.mismatch {
		return "", newErr(CodeKeyring, op, kid, scope, "the Ed25519 private half does not match its public half")
	}
	h := jws.NewHeaders()
	if h.Set("kid", kid) != nil || h.Set(scopeHeader, scope) != nil {
		return "", newErr(CodeMalformed, op, kid, scope, "kid or scope does not fit a header")
	}
	if len(payload) > 3*jwsLimits[1]/4 {
		return "", newErr(CodeTooLarge, op, kid, scope, "the value is larger than a token admits (%d bytes)", 3*jwsLimits[1]/4)
	}
	out, err := jws.Sign(payload, jws.WithKey(jwa.EdDSAEd25519(), edPrivate(p), jws.WithProtectedHeaders(h)))
	if err != nil {
		return "", newErr(CodeKeyring, op, kid, scope, "signing failed")
	}
	if err := sizes(op, kid, scope, string(out), false); err != nil {
		return "", err
	}
	return SignPrefix + string(out), nil
}

// Verify checks a flsig:jws: token and returns its payload. The signer is
// the key the token's kid names (an Ed25519 key: any other kind is
// CodeUnknownKid); only alg Ed25519 is admitted. The token's flenc_scope
// must equal scope, and scope must be within the signer's binding.
func (k *Keyring) Verify(token string, scope string) ([]byte, error) {
	const op = "verify"
	if k == nil {
		return nil, errNoKeyring(op)
	}
	if scope == "" {
		return nil, newErr(CodeScope, op, "", "", "verifying needs a non-empty scope")
	}
	compact, err := compactOf(op, token, signScheme, "jws")
	if err != nil {
		return nil, withScope(err, scope)
	}
	h, err := readHeader(op, compact)
	if err != nil {
		return nil, withScope(err, scope)
	}
	kid := h.kid
	p := k.signers[kid]
	if p == nil {
		return nil, newErr(CodeUnknownKid, op, kid, scope, "no such signing key in the keyring")
	}
	if err := sizes(op, kid, scope, compact, false); err != nil {
		return nil, err
	}
	if err := h.check(op, algSign, "", jwsMembers); err != nil {
		return nil, withScope(err, scope)
	}
	if err := segments(op, kid, compact, 3, false); err != nil {
		return nil, withScope(err, scope)
	}
	payload, err := jws.Verify([]byte(compact), jws.WithKey(jwa.EdDSAEd25519(), edPublic(p)))
	if err != nil {
		return nil, newErr(CodeAuthentication, op, kid, scope, "the signature does not verify under this key")
	}
	if h.scope == nil || *h.scope != scope {
		return nil, newErr(CodeScope, op, kid, scope, "scope mismatch: the signature is scoped %s", stamped(h.scope))
	}
	if !slices.Contains(k.scopes[kid], scope) {
		return nil, newErr(CodeScope, op, kid, scope, "the signer is bound to scopes %q", k.scopes[kid])
	}
	return payload, nil
}

// KidOf returns the kid a flenc or flsig token names, read without a key
// (unauthenticated): which key a stored token still depends on.
func KidOf(token string) (string, error) {
	scheme, env := sealScheme, "jwe"
	if strings.HasPrefix(token, signScheme) {
		scheme, env = signScheme, "jws"
	}
	compact, err := compactOf("inspect", token, scheme, env)
	if err != nil {
		return "", err
	}
	h, err := readHeader("inspect", compact)
	if err != nil {
		return "", err
	}
	return h.kid, nil
}

func errNoKeyring(op string) error {
	return &Error{Code: CodeKeyring, Op: op, Msg: "no keyring (nil *Keyring)"}
}
