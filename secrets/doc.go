// Package secrets seals, opens, signs and verifies values with a keyring,
// in the token and keyring format of the Python flechtctl and
// flechtwerk[secrets] packages (0.17): a config record's API key, a
// customer token in state or a field of an output travels through Kafka
// as a token, not as plaintext, and tokens written by either side open on
// the other.
//
// # Tokens
//
// A sealed value is "flenc:jwe:" followed by an RFC 7516 compact JWE:
// dir + A256GCM under a 32-byte oct key, or ECDH-ES+A256KW + A256GCM to
// an X25519 recipient key (whose public half seals and private half
// opens). A signed value is "flsig:jws:" followed by an RFC 7515 compact
// JWS, alg Ed25519 (RFC 9864). The kind of the key behind the token's kid
// decides which (alg, enc) pair is admitted: a token never chooses, so a
// dir token under a recipient kid, alg none, compression or an unknown
// header member is refused (CodeAlgorithm, CodeMalformed).
//
// A scope binds a token to a compartment: flenc_scope in the protected
// header, authenticated with the ciphertext or signature. A scoped reader
// refuses a token of another scope and accepts an unscoped one (so a scope
// can be added to a field, then swept in with Reseal); an unscoped reader
// refuses a scoped token. A key bound to scopes serves only those, on
// write and on read. Signatures always carry a scope and are accepted for
// exactly that scope.
//
// # Keyring
//
// A Keyring is read from an RFC 7517 JWK Set with a "primary" member and
// the optional "flenc_primaries" (sealing key per scope), "flenc_signing"
// (signing key per scope) and per-key "flenc_scopes" (Parse), or from its
// password-protected form, a PBES2-HS512+A256KW JWE (Load). Rotation adds
// a key and makes it the one that seals (Rotate); the old keys keep
// opening what they sealed until they are removed.
//
// # Codecs
//
// Sealed and Signed are transformer.Codec values (they also satisfy
// configtopic.Decoder), so they serve state (transformer.StateCodec),
// cursors, sink values and config records, whole or per field. Their
// encoding is the token as a JSON string: a field of type json.RawMessage
// holds one, and Sealed(k, Signed(k, inner, s), Scope(s)) is the
// recommended sign-then-encrypt composition, byte-compatible with
// flechtwerk's ENCRYPTED(SIGNED(inner, scope=s), scope=s). ReadPlaintext
// and ReadUnsigned are the migration knobs for legacy values. NewMetrics
// counts seals, opens and failures by reason.
//
// # Errors
//
// Every error is an *Error with a stable Code: CodeUnknownKid (the key is
// missing here), CodeAuthentication (same kid, other bytes, or tampering),
// CodeScope, CodeAlgorithm, CodeMalformed, and the keyring's codes. Error
// strings name the operation, kid and scope, never key material or
// values.
//
// # Concurrency
//
// A *Keyring is immutable (its editing methods return a new one) and safe
// for concurrent use, as are the codecs and *Metrics. The JOSE work is
// done by github.com/lestrrat-go/jwx/v3.
package secrets
