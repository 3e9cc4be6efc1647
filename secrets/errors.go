package secrets

import (
	"fmt"
	"strings"
)

// Code is the stable identifier of a secrets error. Match on it with
// errors.Is and the ErrXxx sentinels, never on messages.
type Code string

// The codes of the package. A token that fails to open or verify never
// yields a value: the codec (and so the transform, extractor or config
// table using it) fails, and the record is handled like any undecodable
// one.
const (
	// CodeMalformed: the value is not a well-formed flenc:jwe: or
	// flsig:jws: token (unknown envelope, bad base64url, a header that is
	// not a JSON object, no kid, a header member the format does not
	// admit).
	CodeMalformed Code = "SECRET_MALFORMED"
	// CodeUnknownKid: the token names a kid this keyring does not hold
	// (or holds as another kind: a signing kid on a flenc token). The key
	// is missing here; restore it to the keyring.
	CodeUnknownKid Code = "SECRET_UNKNOWN_KID"
	// CodeAuthentication: the kid is held but the token does not
	// authenticate under it: tampered ciphertext or signature, or the same
	// kid bound to different bytes on the writing side.
	CodeAuthentication Code = "SECRET_AUTHENTICATION_FAILED"
	// CodeAlgorithm: the token's (alg, enc) pair is not the one the kind
	// of the key behind its kid admits (dir+A256GCM for an oct key,
	// ECDH-ES+A256KW+A256GCM for an X25519 key, Ed25519 for a signing
	// key), or it asks for compression. "none" is never admitted.
	CodeAlgorithm Code = "SECRET_ALGORITHM_NOT_ALLOWED"
	// CodeScope: the token's flenc_scope is not the reader's scope (a
	// relocation or a downgrade), the key is bound to other scopes, or the
	// keyring has no key that may seal or sign that scope.
	CodeScope Code = "SECRET_SCOPE_REFUSED"
	// CodeTooLarge: a token, or one of its parts, is larger than the
	// format admits (a JWE's protected header 1024 bytes, ciphertext 64
	// KiB; a JWS's header 512 bytes, payload 128000 bytes, all base64url):
	// readers refuse it, so Seal and Sign refuse to write it.
	CodeTooLarge Code = "SECRET_TOO_LARGE"
	// CodeNoPrivateKey: the keyring holds only the public half of the
	// token's recipient key: it can seal to it but not open.
	CodeNoPrivateKey Code = "SECRET_NO_PRIVATE_KEY"
	// CodePlaintext: a sealed codec read a value that is not a flenc
	// token and its ReadPlaintext migration knob is off.
	CodePlaintext Code = "SECRET_PLAINTEXT_REFUSED"
	// CodeUnsigned: a signed codec read a value that is not a flsig token
	// and its ReadUnsigned migration knob is off.
	CodeUnsigned Code = "SECRET_UNSIGNED_REFUSED"
	// CodeKeyring: a keyring document or a keyring edit is invalid (the
	// message names the kid or scope at fault).
	CodeKeyring Code = "KEYRING_INVALID"
	// CodeKeyringLocked: a password-protected keyring could not be
	// opened: no password, a wrong one, or a damaged file.
	CodeKeyringLocked Code = "KEYRING_LOCKED"
)

// Sentinels, one per code: errors.Is(err, ErrUnknownKid) is true for every
// *Error with CodeUnknownKid.
var (
	ErrMalformed      = &Error{Code: CodeMalformed}
	ErrUnknownKid     = &Error{Code: CodeUnknownKid}
	ErrAuthentication = &Error{Code: CodeAuthentication}
	ErrAlgorithm      = &Error{Code: CodeAlgorithm}
	ErrScope          = &Error{Code: CodeScope}
	ErrNoPrivateKey   = &Error{Code: CodeNoPrivateKey}
	ErrTooLarge       = &Error{Code: CodeTooLarge}
	ErrPlaintext      = &Error{Code: CodePlaintext}
	ErrUnsigned       = &Error{Code: CodeUnsigned}
	ErrKeyring        = &Error{Code: CodeKeyring}
	ErrKeyringLocked  = &Error{Code: CodeKeyringLocked}
)

// Error is every error of the package. Its message names the operation,
// the kid and the scope, never key material or a value: it is safe to log.
// Opening or verifying the same token again fails the same way; retrying
// only helps after the keyring changed.
type Error struct {
	// Code is the stable identifier of the failure.
	Code Code
	// Op is the operation: seal, open, sign, verify or keyring.
	Op string
	// Kid is the token's key id (or the keyring entry at fault), if known.
	Kid string
	// Scope is the reader's or writer's scope, if any.
	Scope string
	// Msg says what is wrong.
	Msg string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("secrets: ")
	b.WriteString(string(e.Code))
	if e.Op != "" {
		b.WriteString(": ")
		b.WriteString(e.Op)
	}
	if e.Kid != "" {
		fmt.Fprintf(&b, " kid=%q", e.Kid)
	}
	if e.Scope != "" {
		fmt.Fprintf(&b, " scope=%q", e.Scope)
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	return b.String()
}

// Is matches any *Error with the same code: errors.Is(err, ErrScope).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func newErr(code Code, op, kid, scope, format string, args ...any) *Error {
	return &Error{Code: code, Op: op, Kid: printable(kid), Scope: printable(scope), Msg: fmt.Sprintf(format, args...)}
}

func keyringErr(format string, args ...any) *Error {
	return &Error{Code: CodeKeyring, Op: "keyring", Msg: fmt.Sprintf(format, args...)}
}

// printable bounds an identifier read from a token (attacker-controlled)
// before it enters a message.
func printable(s string) string {
	const max = 128
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
