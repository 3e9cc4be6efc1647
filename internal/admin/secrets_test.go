package admin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/admin"
	"github.com/flechtwerk/flechtwerk/secrets"
)

// secretCLI runs the admin command with stdin and environment variables and
// returns its exit code, stdout and stderr.
func secretCLI(t *testing.T, stdin string, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut strings.Builder
	code := admin.Run(context.Background(), args, admin.Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string { return vars[k] },
	})
	return code, strings.TrimSuffix(out.String(), "\n"), errOut.String()
}

func TestKeyringVerbs(t *testing.T) {
	dir := t.TempDir()
	kr := filepath.Join(dir, "keyring.jwe")
	pw := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pw, []byte("a keyring password\n"), 0o600))
	env := map[string]string{"API_KEY": "key-from-env", "PW": "a keyring password"}
	ok := func(stdin string, args ...string) string {
		t.Helper()
		code, out, errOut := secretCLI(t, stdin, env, args...)
		require.Equal(t, admin.ExitOK, code, "%q: %s", args, errOut)
		return out
	}

	ok("", "keyring", "create", kr, "--kid", "k1", "--protect", "--password-file", pw)
	doc, err := os.ReadFile(kr)
	require.NoError(t, err)
	require.True(t, secrets.IsProtected(doc), "create --protect writes a protected keyring")
	st, err := os.Stat(kr)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	code, _, errOut := secretCLI(t, "", env, "keyring", "create", kr, "--kid", "k9")
	require.Equal(t, admin.ExitError, code, "an existing file is not overwritten")
	require.Contains(t, errOut, "--force")

	ok("", "keyring", "add", kr, "--kid", "x1", "--type", "x25519", "--scope", "api_key", "--primary-for", "api_key", "--password-env", "PW")
	require.Regexp(t, `x1\s+x25519\s+true\s+api_key`, ok("", "keyring", "show", kr, "--password-file", pw))
	doc, err = os.ReadFile(kr)
	require.NoError(t, err)
	require.True(t, secrets.IsProtected(doc), "an edited protected keyring stays protected")
	code, _, errOut = secretCLI(t, "", env, "open", "--keyring", kr, "flenc:jwe:x")
	require.Equal(t, admin.ExitError, code)
	require.Contains(t, errOut, "password-protected", "a protected keyring needs its password")

	// The value verbs on a plain keyring (PBKDF2 makes every open of a
	// protected one slow).
	kr = filepath.Join(dir, "keyring.json")
	ok("", "keyring", "create", kr, "--kid", "k1")
	ok("", "keyring", "add", kr, "--kid", "x1", "--type", "x25519", "--scope", "api_key", "--primary-for", "api_key")
	ok("", "keyring", "add", kr, "--kid", "s1", "--type", "ed25519", "--scope", "api_key", "--signing-for", "api_key")
	old := ok("secret-one\n", "seal", "--keyring", kr, "--string")
	ok("", "keyring", "rotate", kr, "--kid", "k2")
	show := ok("", "keyring", "show", kr)
	require.Regexp(t, `k2\s+oct\s+true\s+-\s+primary`, show)
	require.Regexp(t, `x1\s+x25519\s+true\s+api_key`, show)

	kid, err := secrets.KidOf(old)
	require.NoError(t, err)
	require.Equal(t, "k1", kid)
	require.Equal(t, "secret-one", ok("", "open", "--keyring", kr, "--string", old), "the rotated-away key still opens")
	fresh := ok("", "seal", "--keyring", kr, "--string", "--env", "API_KEY", "--scope", "api_key")
	kid, _ = secrets.KidOf(fresh)
	require.Equal(t, "x1", kid, "the scope's sealing key seals")
	require.Equal(t, "key-from-env", ok("", "open", "--keyring", kr, "--string", "--scope", "api_key", fresh))
	resealed := ok("", "reseal", "--keyring", kr, old)
	kid, _ = secrets.KidOf(resealed)
	require.Equal(t, "k2", kid)

	in := filepath.Join(dir, "value.json")
	require.NoError(t, os.WriteFile(in, []byte(`{"a":1}`), 0o600))
	sig := ok("", "sign", "--keyring", kr, "--scope", "api_key", "--in", in)
	require.True(t, strings.HasPrefix(sig, secrets.SignPrefix))
	require.Equal(t, `{"a":1}`, ok(sig, "verify", "--keyring", kr, "--scope", "api_key"))

	jwk := ok("", "keyring", "export", kr, "x1")
	require.Contains(t, jwk, `"x"`)
	require.NotContains(t, jwk, `"d"`, "export prints the public half only")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"open", "--keyring", kr, "--scope", "db", fresh}, "SECRET_SCOPE_REFUSED"},
		{[]string{"verify", "--keyring", kr, "--scope", "db", sig}, "SECRET_SCOPE_REFUSED"},
		{[]string{"seal", "--keyring", kr, "--password-file", pw}, "not valid JSON"},
		{[]string{"keyring", "remove", kr, "k2", "--password-file", pw}, "primary"},
	} {
		code, _, errOut := secretCLI(t, "plain text", env, tc.args...)
		require.Equal(t, admin.ExitError, code, "%q", tc.args)
		require.Contains(t, errOut, tc.want)
	}
	for _, args := range [][]string{
		{"seal", "--keyring", kr, "a-secret-on-the-command-line"},
		{"seal", "--scope", "x"},
		{"keyring"},
		{"keyring", "bogus", kr},
		{"keyring", "add", kr},
	} {
		code, _, errOut := secretCLI(t, "", env, args...)
		require.Equal(t, admin.ExitUsage, code, "%q: %s", args, errOut)
	}
}
