package secrets

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwe"
)

// A password-protected keyring is an RFC 7517 §7 encrypted JWK Set: a
// compact JWE, PBES2-HS512+A256KW + A256GCM, cty jwk-set+json.
const (
	keyringCty        = "jwk-set+json"
	keyringIterations = 210000 // PBKDF2-HMAC-SHA512, as flechtctl writes
	maxIterations     = 300000 // the most flechtctl's reader accepts
	// MinPasswordBytes is the shortest keyring password accepted.
	MinPasswordBytes = 14
)

// IsProtected reports whether doc is a password-protected keyring: a
// compact JWE whose header has cty jwk-set+json.
func IsProtected(doc []byte) bool {
	parts := strings.Split(strings.TrimSpace(string(doc)), ".")
	if len(parts) != 5 {
		return false
	}
	b, err := decodeB64(parts[0])
	if err != nil {
		return false
	}
	var h map[string]any
	if json.Unmarshal(b, &h) != nil {
		return false
	}
	return h["cty"] == keyringCty
}

// Protect returns the keyring as a password-protected document (without
// a trailing newline), a fresh salt per call. The password must have at
// least MinPasswordBytes bytes.
func (k *Keyring) Protect(password []byte) ([]byte, error) {
	if len(password) < MinPasswordBytes {
		return nil, keyringErr("a keyring password must be at least %d bytes", MinPasswordBytes)
	}
	h := jwe.NewHeaders()
	if err := h.Set("cty", keyringCty); err != nil {
		return nil, keyringErr("protect: %v", err)
	}
	out, err := jwe.Encrypt(k.Document(), jwe.WithKey(jwa.PBES2_HS512_A256KW(), password),
		jwe.WithContentEncryption(jwa.A256GCM()), jwe.WithProtectedHeaders(h),
		jwe.WithPBES2Count(keyringIterations), jwe.WithCompact())
	if err != nil {
		return nil, keyringErr("protect: encryption failed")
	}
	return out, nil
}

// Load reads a keyring document, plain or password-protected (see
// IsProtected). A protected one needs password: a missing, short or wrong
// password, or a damaged document, is CodeKeyringLocked. A plain document
// ignores password.
func Load(doc []byte, password []byte) (*Keyring, error) {
	if !IsProtected(doc) {
		return Parse(doc)
	}
	locked := &Error{Code: CodeKeyringLocked, Op: "keyring", Msg: "cannot open the password-protected keyring: wrong password or damaged file"}
	if len(password) < MinPasswordBytes {
		return nil, locked
	}
	compact := bytes.TrimSpace(doc)
	h, err := readKeyringHeader(compact)
	if err != nil || h.alg != jwa.PBES2_HS512_A256KW().String() || h.enc != encA256GCM {
		return nil, locked
	}
	plain, err := jwe.Decrypt(compact, jwe.WithKey(jwa.PBES2_HS512_A256KW(), password),
		jwe.WithMaxPBES2Count(maxIterations), jwe.WithMinPBES2Count(1))
	if err != nil {
		return nil, locked
	}
	return Parse(plain)
}

type keyringHeader struct {
	alg, enc string
}

func readKeyringHeader(compact []byte) (keyringHeader, error) {
	seg, _, _ := bytes.Cut(compact, []byte("."))
	b, err := decodeB64(string(seg))
	if err != nil {
		return keyringHeader{}, err
	}
	var h struct {
		Alg string `json:"alg"`
		Enc string `json:"enc"`
	}
	err = json.Unmarshal(b, &h)
	return keyringHeader{h.Alg, h.Enc}, err
}
