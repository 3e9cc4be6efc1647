package secrets

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// KeyBytes is the length of every key this package mints or accepts: an
// AES-256 key, and each half of an X25519 or Ed25519 key (the Ed25519
// private half is its 32-byte seed).
const KeyBytes = 32

// Kind is the kind of a keyring entry.
type Kind string

// The kinds of key a keyring holds.
const (
	// Oct is a 32-byte symmetric key: it seals and opens dir+A256GCM
	// tokens.
	Oct Kind = "oct"
	// X25519 is a recipient key: its public half seals
	// ECDH-ES+A256KW+A256GCM tokens, its private half opens them. It must
	// be bound to scopes.
	X25519 Kind = "x25519"
	// Ed25519 is a signing key: its private half signs, its public half
	// verifies. It must be bound to scopes.
	Ed25519 Kind = "ed25519"
)

type pair struct {
	public, private []byte // private nil: a public-only entry
	// mismatch: the private half does not derive the public one, refused
	// when the private half is used (not at load).
	mismatch bool
	ecdhPriv *ecdh.PrivateKey
	ecdhPub  *ecdh.PublicKey
	edPriv   ed25519.PrivateKey
}

// Keyring is a set of keys, each named by a kid, plus the roles: the
// primary sealing key, the sealing key per scope (primaries) and the
// signing key per scope (signing). Any key may be bound to the scopes it
// serves; X25519 and Ed25519 keys must be.
//
// Its file form is an RFC 7517 JWK Set with a "primary" member and the
// optional "flenc_primaries", "flenc_signing" and per-key "flenc_scopes"
// members (see Parse and Document), the same document the Python
// flechtctl package reads and writes. A *Keyring is immutable and safe
// for concurrent use; the editing methods (Add, Rotate, SetPrimary, ...)
// return a new one.
type Keyring struct {
	oct        map[string][]byte
	recipients map[string]*pair
	signers    map[string]*pair
	scopes     map[string][]string // sorted, deduplicated
	primary    string
	primaries  map[string]string
	signing    map[string]string
}

// spec is the material of a keyring before validation.
type spec struct {
	oct        map[string][]byte
	recipients map[string]*pair
	signers    map[string]*pair
	scopes     map[string][]string
	primary    string
	primaries  map[string]string
	signing    map[string]string
}

func (k *Keyring) spec() spec {
	return spec{
		oct: maps.Clone(k.oct), recipients: maps.Clone(k.recipients), signers: maps.Clone(k.signers),
		scopes: maps.Clone(k.scopes), primary: k.primary,
		primaries: maps.Clone(k.primaries), signing: maps.Clone(k.signing),
	}
}

// build validates s the way flechtctl's Keyring constructor does and
// returns the keyring.
func build(s spec) (*Keyring, error) {
	for _, m := range []*map[string]string{&s.primaries, &s.signing} {
		if *m == nil {
			*m = map[string]string{}
		}
	}
	if s.oct == nil {
		s.oct = map[string][]byte{}
	}
	if s.recipients == nil {
		s.recipients = map[string]*pair{}
	}
	if s.signers == nil {
		s.signers = map[string]*pair{}
	}
	if s.scopes == nil {
		s.scopes = map[string][]string{}
	}
	if len(s.oct) == 0 && len(s.recipients) == 0 {
		return nil, keyringErr("a keyring needs at least one key")
	}
	held := map[string]bool{}
	for _, kids := range [][]string{slices.Collect(maps.Keys(s.oct)), slices.Collect(maps.Keys(s.recipients)), slices.Collect(maps.Keys(s.signers))} {
		for _, kid := range kids {
			if kid == "" {
				return nil, keyringErr("a key id must be a non-empty string")
			}
			if held[kid] {
				return nil, keyringErr("kid %q is held as more than one kind of key", kid)
			}
			held[kid] = true
		}
	}
	for _, kid := range sortedKeys(s.oct) {
		if n := len(s.oct[kid]); n != KeyBytes {
			return nil, keyringErr("key %q is %d bytes, expected %d (AES-256)", kid, n, KeyBytes)
		}
	}
	for _, kind := range []struct {
		name  string
		pairs map[string]*pair
	}{{"X25519", s.recipients}, {"Ed25519", s.signers}} {
		for _, kid := range sortedKeys(kind.pairs) {
			p := kind.pairs[kid]
			if len(p.public) != KeyBytes {
				return nil, keyringErr("%s key %q has a %d-byte public half, expected %d", kind.name, kid, len(p.public), KeyBytes)
			}
			if p.private != nil && len(p.private) != KeyBytes {
				return nil, keyringErr("%s key %q has a %d-byte private half, expected %d", kind.name, kid, len(p.private), KeyBytes)
			}
		}
	}
	if _, ok := s.oct[s.primary]; !ok {
		if _, ok := s.recipients[s.primary]; !ok {
			// The value is not echoed: it is no kid of the keyring, and a
			// pasted key must not reach a log.
			return nil, keyringErr("primary is not among the sealing keys %q", append(sortedKeys(s.oct), sortedKeys(s.recipients)...))
		}
	}
	for _, kid := range sortedKeys(s.scopes) {
		if !held[kid] {
			return nil, keyringErr("scopes name kid %q, which the keyring does not hold", kid)
		}
		if len(s.scopes[kid]) == 0 || slices.Contains(s.scopes[kid], "") {
			return nil, keyringErr("key %q must be bound to a non-empty set of non-empty scope names", kid)
		}
		s.scopes[kid] = normScopes(s.scopes[kid])
	}
	for _, kid := range append(sortedKeys(s.recipients), sortedKeys(s.signers)...) {
		if _, ok := s.scopes[kid]; !ok {
			return nil, keyringErr("public-key kid %q must be bound to the scopes it serves", kid)
		}
	}
	for _, scope := range sortedKeys(s.primaries) {
		kid := s.primaries[scope]
		if scope == "" {
			return nil, keyringErr("primaries map an empty scope to %q", kid)
		}
		_, isOct := s.oct[kid]
		_, isRecipient := s.recipients[kid]
		if !isOct && !isRecipient {
			return nil, keyringErr("primaries map scope %q to %s, which is not a sealing key", scope, heldName(held, kid))
		}
		if bound, ok := s.scopes[kid]; ok && !slices.Contains(bound, scope) {
			return nil, keyringErr("primaries map scope %q to %q, which is not bound to it", scope, kid)
		}
	}
	for _, scope := range sortedKeys(s.signing) {
		kid := s.signing[scope]
		if scope == "" {
			return nil, keyringErr("signing maps an empty scope to %q", kid)
		}
		if p, ok := s.signers[kid]; !ok || p.private == nil {
			return nil, keyringErr("signing maps scope %q to %s, which is not a private signing key", scope, heldName(held, kid))
		}
		if !slices.Contains(s.scopes[kid], scope) {
			return nil, keyringErr("signing maps scope %q to %q, which is not bound to it", scope, kid)
		}
	}
	for _, p := range s.recipients {
		if err := p.prepareX25519(); err != nil {
			return nil, err
		}
	}
	for _, p := range s.signers {
		p.prepareEd25519()
	}
	return &Keyring{oct: s.oct, recipients: s.recipients, signers: s.signers, scopes: s.scopes,
		primary: s.primary, primaries: s.primaries, signing: s.signing}, nil
}

// heldName names kid in a message if the keyring holds it; an unknown
// value is not echoed (it may be pasted material).
func heldName(held map[string]bool, kid string) string {
	if held[kid] {
		return fmt.Sprintf("%q", kid)
	}
	return "a kid the keyring does not hold"
}

func (p *pair) prepareX25519() error {
	if p.ecdhPub != nil {
		return nil
	}
	pub, err := ecdh.X25519().NewPublicKey(p.public)
	if err != nil {
		return keyringErr("an X25519 public half is not a valid key")
	}
	p.ecdhPub = pub
	if p.private != nil {
		priv, err := ecdh.X25519().NewPrivateKey(p.private)
		if err != nil {
			return keyringErr("an X25519 private half is not a valid key")
		}
		p.ecdhPriv = priv
		p.mismatch = !bytes.Equal(priv.PublicKey().Bytes(), p.public)
	}
	return nil
}

// prepareEd25519 derives the signing key once; a pair is shared by the
// keyrings an edit derives from one another and is never written after
// its first keyring was built.
func (p *pair) prepareEd25519() {
	if p.private != nil && p.edPriv == nil {
		p.edPriv = ed25519.NewKeyFromSeed(p.private)
		p.mismatch = !bytes.Equal(p.edPriv.Public().(ed25519.PublicKey), p.public)
	}
}

func normScopes(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// Parse reads a keyring document: an RFC 7517 JWK Set with a "primary"
// member. Keys are oct (a base64url "k" of 32 bytes) or OKP with crv
// X25519 (recipients) or Ed25519 (signers), a public "x" and an optional
// private "d"; every key needs a "kid". A key's "flenc_scopes" (a
// non-empty array of scope names) binds it, required for OKP keys.
// "flenc_primaries" and "flenc_signing" map scopes to kids. Unknown
// members are ignored. A password-protected document is refused (use
// Load). Every problem is an *Error with CodeKeyring naming the kid or
// scope at fault and no key material.
func Parse(doc []byte) (*Keyring, error) {
	if IsProtected(doc) {
		return nil, keyringErr("keyring document is password-protected: open it with Load and its password")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		if err == nil || isType(err) {
			return nil, keyringErr("keyring document must be a JSON object")
		}
		return nil, keyringErr("keyring document is not valid JSON")
	}
	var raws []json.RawMessage
	if rk, ok := top["keys"]; ok {
		if err := json.Unmarshal(rk, &raws); err != nil || isNull(rk) {
			return nil, keyringErr("keyring 'keys' must be a JSON array")
		}
	}
	s := spec{oct: map[string][]byte{}, recipients: map[string]*pair{}, signers: map[string]*pair{}, scopes: map[string][]string{}}
	held := map[string]bool{}
	for _, raw := range raws {
		kid, kind, p, oct, bound, err := parseJWK(raw, held)
		if err != nil {
			return nil, err
		}
		held[kid] = true
		if bound != nil {
			s.scopes[kid] = bound
		}
		switch kind {
		case Oct:
			s.oct[kid] = oct
		case X25519:
			s.recipients[kid] = p
		default:
			s.signers[kid] = p
		}
	}
	rp, ok := top["primary"]
	if !ok {
		return nil, keyringErr("keyring document has no top-level 'primary' member")
	}
	if err := json.Unmarshal(rp, &s.primary); err != nil || isNull(rp) {
		return nil, keyringErr("keyring 'primary' must be a kid string")
	}
	var err error
	if s.primaries, err = parseScopeMap(top, "flenc_primaries"); err != nil {
		return nil, err
	}
	if s.signing, err = parseScopeMap(top, "flenc_signing"); err != nil {
		return nil, err
	}
	return build(s)
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func isType(err error) bool {
	_, ok := err.(*json.UnmarshalTypeError)
	return ok
}

func parseScopeMap(top map[string]json.RawMessage, member string) (map[string]string, error) {
	m := map[string]string{}
	raw, ok := top[member]
	if !ok {
		return m, nil
	}
	if err := json.Unmarshal(raw, &m); err != nil || isNull(raw) {
		return nil, keyringErr("keyring %q must be a JSON object of scope to kid strings", member)
	}
	return m, nil
}

// parseJWK parses one JWK, checking in flechtctl's order: object, kty,
// kid, duplicate, scopes, material.
func parseJWK(raw json.RawMessage, held map[string]bool) (kid string, kind Kind, p *pair, oct []byte, bound []string, err error) {
	var m map[string]json.RawMessage
	if e := json.Unmarshal(raw, &m); e != nil || m == nil {
		return "", "", nil, nil, nil, keyringErr("each JWK must be a JSON object")
	}
	var kty string
	if e := json.Unmarshal(m["kty"], &kty); e != nil || (kty != "OKP" && kty != "oct") {
		return "", "", nil, nil, nil, keyringErr("unsupported key type: only oct (symmetric) and OKP (X25519, Ed25519) keys are used")
	}
	if e := json.Unmarshal(m["kid"], &kid); e != nil || kid == "" {
		return "", "", nil, nil, nil, keyringErr("every JWK needs a non-empty string kid")
	}
	if held[kid] {
		return "", "", nil, nil, nil, keyringErr("duplicate kid %q in the keyring", kid)
	}
	if rs, ok := m["flenc_scopes"]; ok {
		if e := json.Unmarshal(rs, &bound); e != nil || len(bound) == 0 || slices.Contains(bound, "") {
			return "", "", nil, nil, nil, keyringErr("JWK %q 'flenc_scopes' must be a non-empty array of non-empty strings", kid)
		}
	}
	if kty == "oct" {
		oct, err = decodeMember(kid, m, "k")
		return kid, Oct, nil, oct, bound, err
	}
	var crv string
	if e := json.Unmarshal(m["crv"], &crv); e != nil || (crv != "Ed25519" && crv != "X25519") {
		return "", "", nil, nil, nil, keyringErr("JWK %q has an unsupported curve: only X25519 and Ed25519 are used", kid)
	}
	p = &pair{}
	if p.public, err = decodeMember(kid, m, "x"); err != nil {
		return "", "", nil, nil, nil, err
	}
	if _, ok := m["d"]; ok {
		if p.private, err = decodeMember(kid, m, "d"); err != nil {
			return "", "", nil, nil, nil, err
		}
	}
	if crv == "X25519" {
		return kid, X25519, p, nil, bound, nil
	}
	return kid, Ed25519, p, nil, bound, nil
}

var urlToStd = strings.NewReplacer("-", "+", "_", "/")

// decodeB64 decodes base64url the way flechtctl does: '+' and '/' are
// tolerated, padding is optional, any other character is refused.
func decodeB64(s string) ([]byte, error) {
	std := urlToStd.Replace(s)
	if n := len(std) % 4; n != 0 {
		std += strings.Repeat("=", 4-n)
	}
	return base64.StdEncoding.DecodeString(std)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func decodeMember(kid string, m map[string]json.RawMessage, member string) ([]byte, error) {
	raw, ok := m[member]
	if !ok {
		return nil, keyringErr("JWK %q has no %q (key material)", kid, member)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || isNull(raw) {
		return nil, keyringErr("JWK %q has malformed base64url %q", kid, member)
	}
	b, err := decodeB64(s)
	if err != nil {
		return nil, keyringErr("JWK %q has malformed base64url %q", kid, member)
	}
	return b, nil
}

// Document returns the keyring's file form: the JWK Set Parse reads, keys
// sorted by kid, members sorted, two-space indent, newline-terminated. It
// holds the private halves: write it with mode 0600, or use Protect.
func (k *Keyring) Document() []byte {
	var jwks []map[string]any
	for kid, key := range k.oct {
		jwks = append(jwks, map[string]any{"k": b64(key), "kid": kid, "kty": "oct"})
	}
	for kid, p := range k.recipients {
		jwks = append(jwks, okpJWK("X25519", kid, p.public, p.private))
	}
	for kid, p := range k.signers {
		jwks = append(jwks, okpJWK("Ed25519", kid, p.public, p.private))
	}
	for _, j := range jwks {
		if bound, ok := k.scopes[j["kid"].(string)]; ok {
			j["flenc_scopes"] = bound
		}
	}
	slices.SortFunc(jwks, func(a, b map[string]any) int { return strings.Compare(a["kid"].(string), b["kid"].(string)) })
	doc := map[string]any{"keys": jwks, "primary": k.primary}
	if len(k.primaries) > 0 {
		doc["flenc_primaries"] = k.primaries
	}
	if len(k.signing) > 0 {
		doc["flenc_signing"] = k.signing
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		panic(fmt.Sprintf("secrets: marshal keyring: %v", err)) // only strings and maps: cannot fail
	}
	return buf.Bytes()
}

func okpJWK(crv, kid string, public, private []byte) map[string]any {
	j := map[string]any{"crv": crv, "kid": kid, "kty": "OKP", "x": b64(public)}
	if private != nil {
		j["d"] = b64(private)
	}
	return j
}

// PublicJWK returns the public half of entry kid as one JWK (with its
// flenc_scopes), never the private half: what a party that should seal
// to an X25519 key, or check an Ed25519 key's signatures, is given. An oct
// entry has no public half.
func (k *Keyring) PublicJWK(kid string) ([]byte, error) {
	var j map[string]any
	switch {
	case k.oct[kid] != nil:
		return nil, keyringErr("key %q is a symmetric (oct) key and has no public half", kid)
	case k.recipients[kid] != nil:
		j = okpJWK("X25519", kid, k.recipients[kid].public, nil)
	case k.signers[kid] != nil:
		j = okpJWK("Ed25519", kid, k.signers[kid].public, nil)
	default:
		return nil, newErr(CodeUnknownKid, "keyring", kid, "", "no such key in the keyring")
	}
	j["flenc_scopes"] = k.scopes[kid]
	b, _ := json.MarshalIndent(j, "", "  ")
	return append(b, '\n'), nil
}

// Primary returns the kid of the primary sealing key.
func (k *Keyring) Primary() string { return k.primary }

// Kids returns the kids of every entry, sorted.
func (k *Keyring) Kids() []string {
	kids := append(append(sortedKeys(k.oct), sortedKeys(k.recipients)...), sortedKeys(k.signers)...)
	slices.Sort(kids)
	return kids
}

// KindOf returns the kind of entry kid, and false if it is not held.
func (k *Keyring) KindOf(kid string) (Kind, bool) {
	switch {
	case k.oct[kid] != nil:
		return Oct, true
	case k.recipients[kid] != nil:
		return X25519, true
	case k.signers[kid] != nil:
		return Ed25519, true
	}
	return "", false
}

// Scopes returns the scopes entry kid is bound to (nil: unbound).
func (k *Keyring) Scopes(kid string) []string { return slices.Clone(k.scopes[kid]) }

// HasPrivate reports whether entry kid holds its private half (always
// true for an oct key).
func (k *Keyring) HasPrivate(kid string) bool {
	if k.oct[kid] != nil {
		return true
	}
	if p := k.recipients[kid]; p != nil {
		return p.private != nil
	}
	if p := k.signers[kid]; p != nil {
		return p.private != nil
	}
	return false
}

// SealingKid returns the kid that seals a value of scope:
// primaries[scope], else the primary. A bound key refuses a scope outside
// its binding (an unscoped value is outside every binding): CodeScope.
func (k *Keyring) SealingKid(scope string) (string, error) {
	kid, ok := k.primaries[scope]
	if !ok {
		kid = k.primary
	}
	if bound, ok := k.scopes[kid]; ok && !slices.Contains(bound, scope) {
		what := fmt.Sprintf("scope %q", scope)
		if scope == "" {
			what = "an unscoped value"
		}
		return "", newErr(CodeScope, "seal", kid, scope, "key is bound to scopes %q and cannot seal %s", bound, what)
	}
	return kid, nil
}

// SigningKid returns the kid that signs values of scope (CodeScope when
// none is configured).
func (k *Keyring) SigningKid(scope string) (string, error) {
	kid, ok := k.signing[scope]
	if !ok {
		return "", newErr(CodeScope, "sign", "", scope, "no signing key for this scope in the keyring")
	}
	return kid, nil
}

// Generate returns a new keyring holding one freshly generated sealing
// key (Oct or X25519) as its primary, bound to scopes if any are given
// (an X25519 key must be).
func Generate(kid string, kind Kind, scopes ...string) (*Keyring, error) {
	if kind == Ed25519 {
		return nil, keyringErr("an Ed25519 key cannot be primary: create the keyring with a sealing key, then Add it")
	}
	s := spec{primary: kid}
	if err := s.add(kid, kind, scopes); err != nil {
		return nil, err
	}
	return build(s)
}

func (s *spec) add(kid string, kind Kind, scopes []string) error {
	if s.oct == nil {
		s.oct, s.recipients, s.signers, s.scopes = map[string][]byte{}, map[string]*pair{}, map[string]*pair{}, map[string][]string{}
	}
	if s.oct[kid] != nil || s.recipients[kid] != nil || s.signers[kid] != nil {
		return keyringErr("duplicate kid %q in the keyring", kid)
	}
	switch kind {
	case Oct:
		key := make([]byte, KeyBytes)
		if _, err := rand.Read(key); err != nil {
			return keyringErr("generate key: %v", err)
		}
		s.oct[kid] = key
	case X25519:
		priv, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return keyringErr("generate key: %v", err)
		}
		s.recipients[kid] = &pair{public: priv.PublicKey().Bytes(), private: priv.Bytes()}
	case Ed25519:
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return keyringErr("generate key: %v", err)
		}
		s.signers[kid] = &pair{public: pub, private: priv.Seed()}
	default:
		return keyringErr("unknown key kind %q (oct, x25519 or ed25519)", kind)
	}
	if len(scopes) > 0 {
		s.scopes[kid] = scopes
	}
	return nil
}

// Add returns a keyring with one more, freshly generated, key of kind,
// bound to scopes if any are given (X25519 and Ed25519 keys must be). Its
// roles are unchanged: see SetPrimary, SetScopePrimary, SetSigning, or
// Rotate.
func (k *Keyring) Add(kid string, kind Kind, scopes ...string) (*Keyring, error) {
	s := k.spec()
	if err := s.add(kid, kind, scopes); err != nil {
		return nil, err
	}
	return build(s)
}

// Rotate adds a freshly generated key of kind and gives it the role the
// rotation is for: with no scopes, an Oct or X25519 key becomes the
// primary; with scopes, it is bound to them and becomes the sealing key
// (Oct, X25519) or the signing key (Ed25519) of each. The old keys stay:
// tokens they sealed or signed still open and verify; new ones use the
// new key. Remove an old key once no stored token depends on it.
func (k *Keyring) Rotate(kid string, kind Kind, scopes ...string) (*Keyring, error) {
	s := k.spec()
	if err := s.add(kid, kind, scopes); err != nil {
		return nil, err
	}
	switch {
	case kind == Ed25519 && len(scopes) == 0:
		return nil, keyringErr("rotating a signing key needs the scopes it signs")
	case kind == Ed25519:
		for _, sc := range scopes {
			s.signing[sc] = kid
		}
	case len(scopes) == 0:
		s.primary = kid
	default:
		for _, sc := range scopes {
			s.primaries[sc] = kid
		}
	}
	return build(s)
}

// SetPrimary returns a keyring whose primary sealing key is kid.
func (k *Keyring) SetPrimary(kid string) (*Keyring, error) {
	s := k.spec()
	s.primary = kid
	return build(s)
}

// SetScopePrimary returns a keyring whose sealing key for scope is kid.
func (k *Keyring) SetScopePrimary(scope, kid string) (*Keyring, error) {
	s := k.spec()
	s.primaries[scope] = kid
	return build(s)
}

// SetSigning returns a keyring whose signing key for scope is kid.
func (k *Keyring) SetSigning(scope, kid string) (*Keyring, error) {
	s := k.spec()
	s.signing[scope] = kid
	return build(s)
}

// Remove returns a keyring without entry kid, its binding and its roles.
// The primary cannot be removed. Tokens sealed or signed under kid no
// longer open (CodeUnknownKid).
func (k *Keyring) Remove(kid string) (*Keyring, error) {
	if _, ok := k.KindOf(kid); !ok {
		return nil, keyringErr("the keyring holds no key %q", kid)
	}
	if kid == k.primary {
		return nil, keyringErr("%q is the primary key: set another primary first", kid)
	}
	s := k.spec()
	delete(s.oct, kid)
	delete(s.recipients, kid)
	delete(s.signers, kid)
	delete(s.scopes, kid)
	maps.DeleteFunc(s.primaries, func(_, v string) bool { return v == kid })
	maps.DeleteFunc(s.signing, func(_, v string) bool { return v == kid })
	return build(s)
}
