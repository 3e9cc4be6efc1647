package secrets_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/admin"
	"github.com/flechtwerk/flechtwerk/secrets"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestNoSecretInErrorsOrLogs drives every failure path (refused tokens,
// refused plaintext, bad keyring documents, wrong passwords, the admin
// command's errors) and scans what they print for the key material, the
// password and the plaintexts, in every encoding a leak would take.
func TestNoSecretInErrorsOrLogs(t *testing.T) {
	k := testKeyring(t)
	const password = "leak-test password 1234"
	plaintexts := []string{"PLAINTEXT-customer-token-4711", "PLAINTEXT-pasted-api-key-0815"}

	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(k.Document(), &doc))
	var secretsBytes [][]byte
	for _, j := range doc.Keys {
		for _, m := range []string{"k", "d"} {
			if s, ok := j[m].(string); ok {
				b, err := base64.RawURLEncoding.DecodeString(s)
				require.NoError(t, err)
				secretsBytes = append(secretsBytes, b)
			}
		}
	}
	require.Len(t, secretsBytes, 4, "o1, odb, x and s private halves")
	needles := []string{password}
	for _, p := range plaintexts {
		needles = append(needles, p)
	}
	for _, b := range secretsBytes {
		needles = append(needles, string(b), base64.RawURLEncoding.EncodeToString(b), base64.StdEncoding.EncodeToString(b),
			hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)), base64.RawURLEncoding.EncodeToString(b)[:16])
	}

	var out bytes.Buffer // every error string and log line
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	note := func(err error) {
		require.Error(t, err)
		out.WriteString(err.Error())
		out.WriteByte('\n')
	}

	// Tokens that fail every way, through the codecs (logging on).
	sealedField := secrets.Sealed(k, transformer.JSON[string](), secrets.Scope("api_key"), secrets.WithLogger(logger))
	tok, err := sealedField.Encode(plaintexts[0])
	require.NoError(t, err)
	twin, err := secrets.Generate("x", secrets.X25519, "api_key")
	require.NoError(t, err)
	for _, c := range []struct {
		k     *secrets.Keyring
		scope string
		value []byte
	}{
		{twin, "api_key", tok},
		{k, "db", tok},
		{k, "", tok},
		{k, "api_key", []byte(`"` + plaintexts[1] + `"`)},
		{k, "api_key", []byte(strings.Replace(string(tok), ".", ".A", 3))},
	} {
		_, err := secrets.Sealed(c.k, transformer.JSON[string](), secrets.Scope(c.scope), secrets.WithLogger(logger)).Decode(c.value)
		note(err)
	}
	legacy := secrets.Sealed(k, transformer.JSON[string](), secrets.ReadPlaintext(), secrets.WithLogger(logger))
	_, err = legacy.Decode([]byte(`"` + plaintexts[1] + `"`))
	require.NoError(t, err)
	_, err = secrets.Signed(k, transformer.JSON[string](), "api_key", secrets.ReadUnsigned(), secrets.WithLogger(logger)).Decode([]byte(`"` + plaintexts[1] + `"`))
	require.NoError(t, err)
	_, err = secrets.Signed(k, transformer.JSON[string](), "db").Decode([]byte(`"` + plaintexts[1] + `"`))
	note(err)

	// Keyring documents with the material in a wrong place or shape.
	key := base64.RawURLEncoding.EncodeToString(secretsBytes[0])
	for _, d := range []string{
		`{"keys":[{"kty":"oct","kid":"a","k":"` + key[:20] + `"}],"primary":"a"}`,
		`{"keys":[{"kty":"oct","kid":"a","k":"` + key + `!"}],"primary":"a"}`,
		`{"keys":[{"kty":"OKP","crv":"X25519","kid":"a","x":"` + key + `","d":"` + key[:30] + `"}],"primary":"a"}`,
		`{"keys":[{"kty":"oct","kid":"a","k":"` + key + `"}],"primary":"` + key + `x"}`,
		`{"keys":[{"kty":"oct","kid":"a","k":"` + key + `"}],"primary":`,
	} {
		_, err := secrets.Parse([]byte(d))
		note(err)
	}
	protected, err := k.Protect([]byte(password))
	require.NoError(t, err)
	_, err = secrets.Load(protected, []byte(password+"!"))
	note(err)
	_, err = k.Protect([]byte(password[:5]))
	note(err)

	// The admin command's error output.
	dir := t.TempDir()
	path := filepath.Join(dir, "k.jwe")
	require.NoError(t, os.WriteFile(path, protected, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pw"), []byte(password+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "wrong"), []byte(password+"?\n"), 0o600))
	var stdout, stderr bytes.Buffer
	env := admin.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	for _, args := range [][]string{
		{"open", "--keyring", path, "--password-file", filepath.Join(dir, "wrong"), string(tok[1 : len(tok)-1])},
		{"open", "--keyring", path, "--password-file", filepath.Join(dir, "pw"), "--scope", "db", string(tok[1 : len(tok)-1])},
		{"keyring", "show", path, "--password-file", filepath.Join(dir, "pw")},
	} {
		admin.Run(context.Background(), args, env)
	}
	require.Contains(t, stderr.String(), "KEYRING_LOCKED")
	require.Contains(t, stderr.String(), "SECRET_SCOPE_REFUSED")
	require.Contains(t, stdout.String(), "KID", "show lists the entries")
	out.Write(stderr.Bytes())
	out.Write(stdout.Bytes())

	text := out.String()
	require.Contains(t, text, "legacy plaintext", "the migration warning was logged")
	for _, n := range needles {
		require.NotContains(t, text, n, "secret material in errors or logs")
	}
}
