package secrets_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/secrets"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// interopCase is one token of the interoperability exchange
// (integration/secrets/interop.py writes and reads the same shape).
type interopCase struct {
	Name   string `json:"name"`
	Op     string `json:"op"` // open, verify, open-verify
	Scope  string `json:"scope"`
	Value  any    `json:"value,omitempty"`
	Token  string `json:"token"`
	Reason string `json:"reason,omitempty"`
}

const interopPassword = "go keyring password, 0.17 format"

// TestInterop opens, verifies and refuses what the Python flechtctl made
// (keyring.json, keyring.protected, cases.json, refusals.json in
// $SECRETS_INTEROP_DIR), then writes a keyring and tokens of every kind
// (go-*.json) for interop.py to open. integration/secrets/interop.sh runs
// it; without the directory it is skipped.
func TestInterop(t *testing.T) {
	dir := os.Getenv("SECRETS_INTEROP_DIR")
	if dir == "" {
		t.Skip("SECRETS_INTEROP_DIR not set: run integration/secrets/interop.sh")
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		return b
	}
	var cases, refusals []interopCase
	require.NoError(t, json.Unmarshal(read("cases.json"), &cases))
	require.NoError(t, json.Unmarshal(read("refusals.json"), &refusals))
	require.NotEmpty(t, cases)
	require.NotEmpty(t, refusals)

	plain, err := secrets.Parse(read("keyring.json"))
	require.NoError(t, err)
	password := []byte(string(read("password.txt")[:len(read("password.txt"))-1]))
	protected, err := secrets.Load(read("keyring.protected"), password)
	require.NoError(t, err)
	require.Equal(t, plain.Document(), protected.Document(), "the protected keyring holds the plain one's keys")
	_, err = secrets.Load(read("keyring.protected"), append(password, 'x'))
	require.ErrorIs(t, err, secrets.ErrKeyringLocked)

	for name, k := range map[string]*secrets.Keyring{"plain": plain, "protected": protected} {
		for _, c := range cases {
			t.Run(name+"/"+c.Name, func(t *testing.T) {
				var got any
				switch c.Op {
				case "open":
					p, err := k.Open(c.Token, c.Scope)
					require.NoError(t, err)
					require.NoError(t, json.Unmarshal(p, &got))
				case "verify":
					p, err := k.Verify(c.Token, c.Scope)
					require.NoError(t, err)
					require.NoError(t, json.Unmarshal(p, &got))
				default: // the flechtwerk ENCRYPTED(SIGNED(...)) composition, through the codecs
					codec := secrets.Sealed(k, secrets.Signed(k, transformer.JSON[any](), c.Scope), secrets.Scope(c.Scope))
					got, err = codec.Decode(quote(c.Token))
					require.NoError(t, err)
				}
				require.Equal(t, c.Value, got)
			})
		}
	}
	for _, c := range refusals {
		t.Run("refuse/"+c.Name, func(t *testing.T) {
			var err error
			if c.Op == "open" {
				_, err = plain.Open(c.Token, c.Scope)
			} else {
				_, err = plain.Verify(c.Token, c.Scope)
			}
			var se *secrets.Error
			require.True(t, errors.As(err, &se), "refused with a *secrets.Error: %v", err)
			require.Equal(t, c.Reason, secrets.Reason(se.Code))
		})
	}

	writeGoSide(t, dir)
}

func quote(tok string) []byte { b, _ := json.Marshal(tok); return b }

// writeGoSide makes the Go keyring and tokens interop.py checks.
func writeGoSide(t *testing.T, dir string) {
	k, err := secrets.Generate("g-old", secrets.Oct)
	require.NoError(t, err)
	var cases []interopCase
	seal := func(k *secrets.Keyring, name string, v any, scope string) {
		p, err := json.Marshal(v)
		require.NoError(t, err)
		tok, err := k.Seal(p, scope)
		require.NoError(t, err)
		cases = append(cases, interopCase{Name: name, Op: "open", Scope: scope, Value: v, Token: tok})
	}
	seal(k, "oct unscoped, old primary (rotated away)", "before rotation", "")
	k, err = k.Rotate("g-new", secrets.Oct)
	require.NoError(t, err)
	k, err = k.Rotate("g-db", secrets.Oct, "db")
	require.NoError(t, err)
	k, err = k.Rotate("g-x-api", secrets.X25519, "api_key")
	require.NoError(t, err)
	k, err = k.Rotate("g-s", secrets.Ed25519, "api_key", "db")
	require.NoError(t, err)
	require.Equal(t, "g-new", k.Primary())

	seal(k, "oct unscoped, new primary", "s3cret", "")
	seal(k, "oct unscoped, object value", map[string]any{"user": "ü", "n": 3.0, "list": []any{1.0, 2.0}}, "")
	seal(k, "oct scoped db", "db-password", "db")
	seal(k, "x25519 scoped api_key", "api-key-123", "api_key")
	seal(k, "the largest value (a 64 KiB ciphertext)", strings.Repeat("v", 49150), "")
	for _, scope := range []string{"api_key", "db"} {
		codec := secrets.Signed(k, transformer.JSON[string](), scope)
		b, err := codec.Encode("signed " + scope)
		require.NoError(t, err)
		var tok string
		require.NoError(t, json.Unmarshal(b, &tok))
		cases = append(cases, interopCase{Name: "ed25519 " + scope, Op: "verify", Scope: scope, Value: "signed " + scope, Token: tok})
	}
	codec := secrets.Sealed(k, secrets.Signed(k, transformer.JSON[string](), "api_key"), secrets.Scope("api_key"))
	b, err := codec.Encode("sign-then-encrypt")
	require.NoError(t, err)
	var tok string
	require.NoError(t, json.Unmarshal(b, &tok))
	cases = append(cases, interopCase{Name: "sign-then-encrypt api_key", Op: "open-verify", Scope: "api_key", Value: "sign-then-encrypt", Token: tok})

	dbTok, err := k.Seal([]byte(`"x"`), "db")
	require.NoError(t, err)
	sigTok, err := k.Sign([]byte(`"x"`), "api_key")
	require.NoError(t, err)
	gone, err := secrets.Generate("g-gone", secrets.Oct)
	require.NoError(t, err)
	goneTok, err := gone.Seal([]byte(`"x"`), "")
	require.NoError(t, err)
	newTok, err := k.Seal([]byte(`"x"`), "")
	require.NoError(t, err)
	rest := func(tok string) string { _, r, _ := strings.Cut(tok, "."); return r }
	dirHeader := map[string]any{"alg": "dir", "enc": "A256GCM", "kid": "g-new"}
	with := func(kv ...any) map[string]any {
		h := map[string]any{}
		for k, v := range dirHeader {
			h[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i].(string)] = kv[i+1]
		}
		return h
	}
	sigRest := rest(sigTok)
	refusals := []interopCase{
		{Name: "ciphertext over 64 KiB", Op: "open", Token: bigToken(newTok)},
		{Name: "header over 1024 bytes", Op: "open", Token: forge(secrets.SealPrefix, with("typ", strings.Repeat("t", 800)), rest(newTok))},
		{Name: "alg none", Op: "open", Token: forge(secrets.SealPrefix, with("alg", "none"), rest(newTok))},
		{Name: "dir token under a recipient kid", Op: "open", Scope: "api_key", Token: forge(secrets.SealPrefix, with("kid", "g-x-api", "flenc_scope", "api_key"), rest(newTok))},
		{Name: "compression", Op: "open", Token: forge(secrets.SealPrefix, with("zip", "DEF"), rest(newTok))},
		{Name: "unknown header member", Op: "open", Token: forge(secrets.SealPrefix, with("x-extra", 1), rest(newTok))},
		{Name: "enc A128GCM", Op: "open", Token: forge(secrets.SealPrefix, with("enc", "A128GCM"), rest(newTok))},
		{Name: "signature alg EdDSA", Op: "verify", Scope: "api_key", Token: forge(secrets.SignPrefix, map[string]any{"alg": "EdDSA", "kid": "g-s", "flenc_scope": "api_key"}, sigRest)},
		{Name: "signature alg none", Op: "verify", Scope: "api_key", Token: forge(secrets.SignPrefix, map[string]any{"alg": "none", "kid": "g-s", "flenc_scope": "api_key"}, strings.Split(sigRest, ".")[0]+".")},
		{Name: "signature under an oct kid", Op: "verify", Scope: "api_key", Token: forge(secrets.SignPrefix, map[string]any{"alg": "Ed25519", "kid": "g-new", "flenc_scope": "api_key"}, sigRest)},
		{Name: "wrong scope", Op: "open", Scope: "api_key", Token: dbTok},
		{Name: "scoped token, unscoped reader", Op: "open", Scope: "", Token: dbTok},
		{Name: "unknown kid", Op: "open", Scope: "", Token: goneTok},
		{Name: "signature for another scope", Op: "verify", Scope: "db", Token: sigTok},
	}

	prot, err := k.Protect([]byte(interopPassword))
	require.NoError(t, err)
	write := func(name string, b []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	js := func(v any) []byte { b, err := json.MarshalIndent(v, "", " "); require.NoError(t, err); return b }
	write("go-keyring.json", k.Document())
	write("go-keyring.protected", append(prot, '\n'))
	write("go-password.txt", []byte(interopPassword+"\n"))
	write("go-cases.json", js(cases))
	write("go-refusals.json", js(refusals))
}
