package secrets_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/secrets"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// testKeyring holds every kind: o1 (oct, unscoped, primary), odb (oct
// bound to db, db's sealing key), x (X25519 bound to api_key, its sealing
// key), s (Ed25519 bound to api_key and db, their signing key).
func testKeyring(t testing.TB) *secrets.Keyring {
	t.Helper()
	k, err := secrets.Generate("o1", secrets.Oct)
	require.NoError(t, err)
	k, err = k.Rotate("odb", secrets.Oct, "db")
	require.NoError(t, err)
	k, err = k.Rotate("x", secrets.X25519, "api_key")
	require.NoError(t, err)
	k, err = k.Rotate("s", secrets.Ed25519, "api_key", "db")
	require.NoError(t, err)
	return k
}

func header(t *testing.T, tok string) map[string]any {
	t.Helper()
	kid, err := secrets.KidOf(tok)
	require.NoError(t, err)
	require.NotEmpty(t, kid)
	compact := tok[len(secrets.SealPrefix):]
	seg, _, _ := strings.Cut(compact, ".")
	b, err := base64.RawURLEncoding.DecodeString(seg)
	require.NoError(t, err)
	var h map[string]any
	require.NoError(t, json.Unmarshal(b, &h))
	return h
}

func TestSealOpenEveryKind(t *testing.T) {
	k := testKeyring(t)
	for _, tc := range []struct {
		scope, kid, alg string
	}{
		{"", "o1", "dir"},
		{"db", "odb", "dir"},
		{"api_key", "x", "ECDH-ES+A256KW"},
	} {
		t.Run(tc.kid, func(t *testing.T) {
			tok, err := k.Seal([]byte(`"v"`), tc.scope)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(tok, secrets.SealPrefix))
			h := header(t, tok)
			require.Equal(t, tc.kid, h["kid"])
			require.Equal(t, tc.alg, h["alg"])
			require.Equal(t, "A256GCM", h["enc"])
			if tc.scope == "" {
				require.NotContains(t, h, "flenc_scope")
			} else {
				require.Equal(t, tc.scope, h["flenc_scope"])
			}
			p, err := k.Open(tok, tc.scope)
			require.NoError(t, err)
			require.Equal(t, `"v"`, string(p))
		})
	}
	tok, err := k.Sign([]byte(`"v"`), "db")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(tok, secrets.SignPrefix))
	p, err := k.Verify(tok, "db")
	require.NoError(t, err)
	require.Equal(t, `"v"`, string(p))
}

func TestRotation(t *testing.T) {
	k, err := secrets.Generate("k1", secrets.Oct)
	require.NoError(t, err)
	old, err := k.Seal([]byte(`1`), "")
	require.NoError(t, err)
	k, err = k.Rotate("k2", secrets.Oct)
	require.NoError(t, err)
	require.Equal(t, "k2", k.Primary())
	fresh, err := k.Seal([]byte(`2`), "")
	require.NoError(t, err)
	kid, _ := secrets.KidOf(fresh)
	require.Equal(t, "k2", kid, "the new primary seals")
	p, err := k.Open(old, "")
	require.NoError(t, err, "the old key still opens")
	require.Equal(t, "1", string(p))
	resealed, err := k.Reseal(old, "")
	require.NoError(t, err)
	kid, _ = secrets.KidOf(resealed)
	require.Equal(t, "k2", kid)

	k, err = k.Remove("k1")
	require.NoError(t, err)
	_, err = k.Open(old, "")
	require.ErrorIs(t, err, secrets.ErrUnknownKid, "a removed key's tokens no longer open")
	_, err = k.Remove("k2")
	require.ErrorIs(t, err, secrets.ErrKeyring, "the primary cannot be removed")
}

// forge builds a compact token from a header and the rest of a real one.
func forge(prefix string, h map[string]any, rest string) string {
	b, _ := json.Marshal(h)
	return prefix + base64.RawURLEncoding.EncodeToString(b) + "." + rest
}

func TestRefusals(t *testing.T) {
	k := testKeyring(t)
	seal := func(p, scope string) string {
		tok, err := k.Seal([]byte(p), scope)
		require.NoError(t, err)
		return tok
	}
	sign := func(p, scope string) string {
		tok, err := k.Sign([]byte(p), scope)
		require.NoError(t, err)
		return tok
	}
	rest := func(tok string) string { _, r, _ := strings.Cut(tok, "."); return r }
	dirTok, dbTok, xTok, sigTok := seal(`"a"`, ""), seal(`"b"`, "db"), seal(`"c"`, "api_key"), sign(`"d"`, "api_key")

	// A keyring holding an X25519 key under the oct key's kid, and one
	// holding the same kid with other bytes.
	swapped, err := secrets.Generate("o1", secrets.X25519, "any")
	require.NoError(t, err)
	twin, err := secrets.Generate("o1", secrets.Oct)
	require.NoError(t, err)
	other, err := secrets.Generate("gone", secrets.Oct)
	require.NoError(t, err)
	goneTok, err := other.Seal([]byte(`"x"`), "")
	require.NoError(t, err)
	xOnly, err := secrets.Generate("o1", secrets.Oct)
	require.NoError(t, err)
	pub, err := k.PublicJWK("x")
	require.NoError(t, err)
	xOnly = withJWK(t, xOnly, pub)

	tamper := func(tok string, part int) string {
		pre, compact := tok[:len(secrets.SealPrefix)], tok[len(secrets.SealPrefix):]
		parts := strings.Split(compact, ".")
		c := []byte(parts[part])
		if c[0] == 'A' {
			c[0] = 'B'
		} else {
			c[0] = 'A'
		}
		parts[part] = string(c)
		return pre + strings.Join(parts, ".")
	}
	dirHeader := map[string]any{"alg": "dir", "enc": "A256GCM", "kid": "o1"}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}

	for _, tc := range []struct {
		name  string
		k     *secrets.Keyring
		op    string
		token string
		scope string
		want  error
	}{
		{"wrong scope", k, "open", dbTok, "api_key", secrets.ErrScope},
		{"scoped token, unscoped reader (downgrade)", k, "open", dbTok, "", secrets.ErrScope},
		{"unscoped token under a bound key", k, "open", unscopedUnder(t, k, "odb"), "db", secrets.ErrScope},
		{"scope stripped from the header", k, "open", forge(secrets.SealPrefix, map[string]any{"alg": "dir", "enc": "A256GCM", "kid": "odb"}, rest(dbTok)), "db", secrets.ErrAuthentication},
		{"unknown kid", k, "open", goneTok, "", secrets.ErrUnknownKid},
		{"a signing kid on a flenc token", k, "open", forge(secrets.SealPrefix, with(dirHeader, "kid", "s"), rest(dirTok)), "", secrets.ErrUnknownKid},
		{"same kid, other bytes", twin, "open", dirTok, "", secrets.ErrAuthentication},
		{"tampered ciphertext", k, "open", tamper(dirTok, 3), "", secrets.ErrAuthentication},
		{"tampered tag", k, "open", tamper(xTok, 4), "api_key", secrets.ErrAuthentication},
		{"tampered wrapped key", k, "open", tamper(xTok, 1), "api_key", secrets.ErrAuthentication},
		{"tampered header (scope moved)", k, "open", forge(secrets.SealPrefix, with(dirHeader, "flenc_scope", "db"), rest(dirTok)), "db", secrets.ErrAuthentication},
		{"dir token under a recipient kid", swapped, "open", dirTok, "", secrets.ErrAlgorithm},
		{"recipient token under an oct kid", k, "open", forge(secrets.SealPrefix, with(header(t, xTok), "kid", "o1"), rest(xTok)), "api_key", secrets.ErrAlgorithm},
		{"alg none (JWE)", k, "open", forge(secrets.SealPrefix, with(dirHeader, "alg", "none"), rest(dirTok)), "", secrets.ErrAlgorithm},
		{"enc A128GCM", k, "open", forge(secrets.SealPrefix, with(dirHeader, "enc", "A128GCM"), rest(dirTok)), "", secrets.ErrAlgorithm},
		{"compression", k, "open", forge(secrets.SealPrefix, with(dirHeader, "zip", "DEF"), rest(dirTok)), "", secrets.ErrAlgorithm},
		{"unknown header member", k, "open", forge(secrets.SealPrefix, with(dirHeader, "x-extra", 1), rest(dirTok)), "", secrets.ErrMalformed},
		{"public half only", xOnly, "open", xTok, "api_key", secrets.ErrNoPrivateKey},
		{"not a token", k, "open", "s3cret", "", secrets.ErrMalformed},
		{"unknown envelope", k, "open", "flenc:v2:abc", "", secrets.ErrMalformed},
		{"no kid", k, "open", forge(secrets.SealPrefix, map[string]any{"alg": "dir", "enc": "A256GCM"}, rest(dirTok)), "", secrets.ErrMalformed},
		{"header not base64", k, "open", secrets.SealPrefix + "!!!." + rest(dirTok), "", secrets.ErrMalformed},
		{"ciphertext over 64 KiB", k, "open", bigToken(dirTok), "", secrets.ErrTooLarge},
		{"header over 1024 bytes", k, "open", forge(secrets.SealPrefix, with(dirHeader, "typ", strings.Repeat("t", 800)), rest(dirTok)), "", secrets.ErrTooLarge},
		{"signature: header over 512 bytes", k, "verify", forge(secrets.SignPrefix, map[string]any{"alg": "Ed25519", "kid": "s", "flenc_scope": "api_key", "typ": strings.Repeat("t", 400)}, rest(sigTok)), "api_key", secrets.ErrTooLarge},
		{"four parts", k, "open", dirTok[:strings.LastIndex(dirTok, ".")], "", secrets.ErrMalformed},

		{"signature: wrong scope", k, "verify", sigTok, "db", secrets.ErrScope},
		{"signature: no scope", k, "verify", sigTok, "", secrets.ErrScope},
		{"signature: unknown kid", k, "verify", forge(secrets.SignPrefix, map[string]any{"alg": "Ed25519", "kid": "nope", "flenc_scope": "api_key"}, rest(sigTok)), "api_key", secrets.ErrUnknownKid},
		{"signature: an oct kid", k, "verify", forge(secrets.SignPrefix, map[string]any{"alg": "Ed25519", "kid": "o1", "flenc_scope": "api_key"}, rest(sigTok)), "api_key", secrets.ErrUnknownKid},
		{"signature: alg none", k, "verify", forge(secrets.SignPrefix, map[string]any{"alg": "none", "kid": "s", "flenc_scope": "api_key"}, strings.Split(rest(sigTok), ".")[0]+"."), "api_key", secrets.ErrAlgorithm},
		{"signature: alg EdDSA", k, "verify", forge(secrets.SignPrefix, map[string]any{"alg": "EdDSA", "kid": "s", "flenc_scope": "api_key"}, rest(sigTok)), "api_key", secrets.ErrAlgorithm},
		{"signature: alg HS256", k, "verify", forge(secrets.SignPrefix, map[string]any{"alg": "HS256", "kid": "s", "flenc_scope": "api_key"}, rest(sigTok)), "api_key", secrets.ErrAlgorithm},
		{"signature: scope moved in header", k, "verify", forge(secrets.SignPrefix, map[string]any{"alg": "Ed25519", "kid": "s", "flenc_scope": "db"}, rest(sigTok)), "db", secrets.ErrAuthentication},
		{"signature: tampered payload", k, "verify", secrets.SignPrefix + strings.Split(sigTok[len(secrets.SignPrefix):], ".")[0] + ".ImUi." + strings.Split(sigTok, ".")[2], "api_key", secrets.ErrAuthentication},
		{"signature: a flenc token", k, "verify", dirTok, "api_key", secrets.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			var p []byte
			if tc.op == "open" {
				p, err = tc.k.Open(tc.token, tc.scope)
			} else {
				p, err = tc.k.Verify(tc.token, tc.scope)
			}
			require.Nil(t, p)
			require.ErrorIs(t, err, tc.want)
			var se *secrets.Error
			require.ErrorAs(t, err, &se)
		})
	}
}

// unscopedUnder seals an unscoped token under kid's bytes with the
// binding removed, as a writer with an unbound copy of the key would.
func unscopedUnder(t *testing.T, k *secrets.Keyring, kid string) string {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(k.Document(), &doc))
	for _, j := range doc["keys"].([]any) {
		if j.(map[string]any)["kid"] == kid {
			delete(j.(map[string]any), "flenc_scopes")
		}
	}
	delete(doc, "flenc_primaries")
	doc["primary"] = kid
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	unbound, err := secrets.Parse(b)
	require.NoError(t, err)
	tok, err := unbound.Seal([]byte(`"u"`), "")
	require.NoError(t, err)
	return tok
}

// withJWK adds one JWK to k through the file form (as an import would).
func withJWK(t *testing.T, k *secrets.Keyring, jwk []byte) *secrets.Keyring {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(k.Document(), &doc))
	var j any
	require.NoError(t, json.Unmarshal(jwk, &j))
	doc["keys"] = append(doc["keys"].([]any), j)
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	out, err := secrets.Parse(b)
	require.NoError(t, err)
	return out
}

// bigToken replaces tok's ciphertext with one over the 64 KiB limit.
func bigToken(tok string) string {
	parts := strings.Split(tok, ".")
	parts[3] = strings.Repeat("A", 65537)
	return strings.Join(parts, ".")
}

func TestSealRefusals(t *testing.T) {
	var none *secrets.Keyring
	_, err := secrets.Sealed(none, transformer.JSON[int]()).Encode(1)
	require.ErrorIs(t, err, secrets.ErrKeyring, "a nil keyring is an error, not a panic")
	_, err = secrets.Signed(none, transformer.JSON[int](), "s").Decode([]byte(`"flsig:jws:a.b.c"`))
	require.ErrorIs(t, err, secrets.ErrKeyring)

	k := testKeyring(t)
	_, err = k.Seal([]byte(`1`), "other")
	require.NoError(t, err, "an unmapped scope seals under the unbound primary")
	bound, err := secrets.Generate("b", secrets.Oct, "db")
	require.NoError(t, err)
	_, err = bound.Seal([]byte(`1`), "")
	require.ErrorIs(t, err, secrets.ErrScope, "a bound primary cannot seal an unscoped value")
	_, err = bound.Seal([]byte(`1`), "api_key")
	require.ErrorIs(t, err, secrets.ErrScope)
	_, err = k.Sign([]byte(`1`), "")
	require.ErrorIs(t, err, secrets.ErrScope, "a signature needs a scope")
	_, err = k.Sign([]byte(`1`), "nosigner")
	require.ErrorIs(t, err, secrets.ErrScope)

	// What a reader would refuse as too large is not written.
	big := []byte(`"` + strings.Repeat("v", 49151) + `"`) // 49153 bytes: 65538 in base64url
	tok, err := k.Seal(big[:49150], "")
	require.NoError(t, err, "49150 bytes fit the 64 KiB ciphertext")
	_, err = k.Open(tok, "")
	require.NoError(t, err)
	_, err = k.Seal(big, "")
	require.ErrorIs(t, err, secrets.ErrTooLarge)
	_, err = k.Seal([]byte(`1`), strings.Repeat("s", 800))
	require.ErrorIs(t, err, secrets.ErrTooLarge, "a scope too long for the header")
	_, err = k.Sign(big, "api_key")
	require.NoError(t, err)
	_, err = k.Sign([]byte(`"`+strings.Repeat("v", 96000)+`"`), "api_key")
	require.ErrorIs(t, err, secrets.ErrTooLarge)
}

func TestParseValidation(t *testing.T) {
	oct := `{"kty":"oct","kid":"a","k":"` + base64.RawURLEncoding.EncodeToString(make([]byte, 32)) + `"}`
	x := `{"kty":"OKP","crv":"X25519","kid":"x","x":"` + base64.RawURLEncoding.EncodeToString(make([]byte, 32)) + `"`
	for _, tc := range []struct {
		name, doc string
		ok        bool
	}{
		{"minimal", `{"keys":[` + oct + `],"primary":"a"}`, true},
		{"unknown members ignored", `{"keys":[` + oct[:len(oct)-1] + `,"use":"enc"}],"primary":"a","x":1}`, true},
		{"not JSON", `{`, false},
		{"not an object", `[]`, false},
		{"keys not an array", `{"keys":{},"primary":"a"}`, false},
		{"no keys", `{"keys":[],"primary":"a"}`, false},
		{"no primary", `{"keys":[` + oct + `]}`, false},
		{"primary unknown", `{"keys":[` + oct + `],"primary":"b"}`, false},
		{"duplicate kid", `{"keys":[` + oct + `,` + oct + `],"primary":"a"}`, false},
		{"short key", `{"keys":[{"kty":"oct","kid":"a","k":"AAAA"}],"primary":"a"}`, false},
		{"bad base64", `{"keys":[{"kty":"oct","kid":"a","k":"!!"}],"primary":"a"}`, false},
		{"RSA", `{"keys":[{"kty":"RSA","kid":"a"}],"primary":"a"}`, false},
		{"empty kid", `{"keys":[{"kty":"oct","kid":"","k":"AA"}],"primary":""}`, false},
		{"X25519 unbound", `{"keys":[` + oct + `,` + x + `}],"primary":"a"}`, false},
		{"X25519 bound", `{"keys":[` + oct + `,` + x + `,"flenc_scopes":["s"]}],"primary":"a"}`, true},
		{"X25519 primary", `{"keys":[` + x + `,"flenc_scopes":["s"]}],"primary":"x"}`, true},
		{"empty scopes", `{"keys":[` + oct[:len(oct)-1] + `,"flenc_scopes":[]}],"primary":"a"}`, false},
		{"primaries to an unbound scope", `{"keys":[` + oct + `,` + x + `,"flenc_scopes":["s"]}],"primary":"a","flenc_primaries":{"t":"x"}}`, false},
		{"primaries ok", `{"keys":[` + oct + `,` + x + `,"flenc_scopes":["s"]}],"primary":"a","flenc_primaries":{"s":"x"}}`, true},
		{"signing to a non-signer", `{"keys":[` + oct + `],"primary":"a","flenc_signing":{"s":"a"}}`, false},
		{"primaries not an object", `{"keys":[` + oct + `],"primary":"a","flenc_primaries":[]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := secrets.Parse([]byte(tc.doc))
			if tc.ok {
				require.NoError(t, err)
				again, err := secrets.Parse(k.Document())
				require.NoError(t, err)
				require.Equal(t, k.Document(), again.Document(), "Document round-trips")
				return
			}
			require.ErrorIs(t, err, secrets.ErrKeyring)
		})
	}
}

func TestProtectedKeyring(t *testing.T) {
	k := testKeyring(t)
	pw := []byte("a long enough password")
	doc, err := k.Protect(pw)
	require.NoError(t, err)
	require.True(t, secrets.IsProtected(doc))
	require.False(t, secrets.IsProtected(k.Document()))
	_, err = secrets.Parse(doc)
	require.ErrorIs(t, err, secrets.ErrKeyring, "Parse refuses a protected document")
	got, err := secrets.Load(doc, pw)
	require.NoError(t, err)
	require.Equal(t, k.Document(), got.Document())
	for _, bad := range [][]byte{nil, []byte("short"), []byte("a long enough passworD")} {
		_, err = secrets.Load(doc, bad)
		require.ErrorIs(t, err, secrets.ErrKeyringLocked)
	}
	_, err = k.Protect([]byte("short"))
	require.ErrorIs(t, err, secrets.ErrKeyring)
}

type state struct {
	N     int             `json:"n"`
	Token json.RawMessage `json:"token"` // a Sealed field
}

func TestCodecs(t *testing.T) {
	k := testKeyring(t)
	reg := prometheus.NewRegistry()
	m, err := secrets.NewMetrics(reg)
	require.NoError(t, err)

	field := secrets.Sealed(k, transformer.JSON[string](), secrets.Scope("api_key"), secrets.WithMetrics(m))
	b, err := field.Encode("customer-token")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), `"`+secrets.SealPrefix), "the encoding is the token as a JSON string")
	st := transformer.JSON[state]()
	enc, err := st.Encode(state{N: 1, Token: b})
	require.NoError(t, err)
	require.NotContains(t, string(enc), "customer-token")
	back, err := st.Decode(enc)
	require.NoError(t, err)
	v, err := field.Decode(back.Token)
	require.NoError(t, err)
	require.Equal(t, "customer-token", v)

	_, err = field.Decode([]byte(`"customer-token"`))
	require.ErrorIs(t, err, secrets.ErrPlaintext, "plaintext is refused by default")
	legacy := secrets.Sealed(k, transformer.JSON[string](), secrets.Scope("api_key"), secrets.ReadPlaintext(), secrets.WithMetrics(m))
	v, err = legacy.Decode([]byte(`"customer-token"`))
	require.NoError(t, err)
	require.Equal(t, "customer-token", v)
	v, err = legacy.Decode(b)
	require.NoError(t, err, "the migration knob still opens tokens")
	require.Equal(t, "customer-token", v)

	moved := secrets.Sealed(k, transformer.JSON[string](), secrets.Scope("db"), secrets.WithMetrics(m))
	_, err = moved.Decode(b)
	require.ErrorIs(t, err, secrets.ErrScope, "a token cannot move to a differently scoped field")

	ste := secrets.Sealed(k, secrets.Signed(k, transformer.JSON[state](), "api_key", secrets.WithMetrics(m)), secrets.Scope("api_key"), secrets.WithMetrics(m))
	b, err = ste.Encode(state{N: 7, Token: json.RawMessage(`null`)})
	require.NoError(t, err)
	s, err := ste.Decode(b)
	require.NoError(t, err)
	require.Equal(t, 7, s.N)
	unsigned := secrets.Sealed(k, transformer.JSON[state](), secrets.Scope("api_key"))
	b, err = unsigned.Encode(state{N: 8})
	require.NoError(t, err)
	_, err = ste.Decode(b)
	require.ErrorIs(t, err, secrets.ErrUnsigned)

	_, err = secrets.Sealed(k, transformer.Bytes()).Encode([]byte{0xff})
	require.ErrorIs(t, err, secrets.ErrMalformed, "the inner codec must encode JSON")

	require.Equal(t, 2.0, value(t, reg, secrets.MetricSeals, "op", "seal"))
	require.Equal(t, 1.0, value(t, reg, secrets.MetricSeals, "op", "sign"))
	require.Equal(t, 4.0, value(t, reg, secrets.MetricOpens, "op", "open"))
	require.Equal(t, 1.0, value(t, reg, secrets.MetricOpens, "op", "verify"))
	require.Equal(t, 1.0, value(t, reg, secrets.MetricLegacyReads, "op", "open"))
	require.Equal(t, 1.0, value(t, reg, secrets.MetricFailures, "op", "open", "reason", "plaintext_refused"))
	require.Equal(t, 1.0, value(t, reg, secrets.MetricFailures, "op", "open", "reason", "scope_refused"))
	require.Equal(t, 1.0, value(t, reg, secrets.MetricFailures, "op", "verify", "reason", "unsigned_refused"))
}

// value returns the counter series of name with the label pairs kv.
func value(t *testing.T, reg *prometheus.Registry, name string, kv ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				for i := 0; i < len(kv); i += 2 {
					if kv[i] == lp.GetName() && kv[i+1] != lp.GetValue() {
						continue series
					}
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// A keyring stays usable while edits derive new ones from it (run with
// -race: the derived keyrings share its unchanged keys).
func TestConcurrentUseWhileEditing(t *testing.T) {
	k := testKeyring(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			tok, err := k.Sign([]byte(`1`), "api_key")
			if err == nil {
				_, err = k.Verify(tok, "api_key")
			}
			if err == nil {
				_, err = k.Seal([]byte(`1`), "api_key")
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 50 {
		_, err := k.Add(fmt.Sprintf("n%d", i), secrets.Oct)
		require.NoError(t, err)
	}
	<-done
}
