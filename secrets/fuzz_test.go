package secrets_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/secrets"
)

// FuzzToken feeds arbitrary tokens to Open, Verify and KidOf under a
// keyring of every kind: none may panic, every failure is a coded
// *secrets.Error, and a token that opens or verifies carries a payload
// the keyring itself sealed or signed (no forgery from mutations).
func FuzzToken(f *testing.F) {
	k := testKeyring(f)
	payloads := map[string]bool{}
	add := func(tok string, err error) {
		require.NoError(f, err)
		f.Add(tok, "")
		f.Add(tok, "api_key")
		f.Add(tok, "db")
	}
	for _, p := range []string{`"a"`, `{"n":1}`, `[]`} {
		payloads[p] = true
		add(k.Seal([]byte(p), ""))
		add(k.Seal([]byte(p), "db"))
		add(k.Seal([]byte(p), "api_key"))
		add(k.Sign([]byte(p), "api_key"))
	}
	for _, s := range []string{"", "flenc:", "flenc:jwe:", "flenc:jwe:....", "flsig:jws:..", "flenc:jwe:e30.a.b.c.d", "flsig:jws:eyJraWQiOiJzIn0.e30.AA"} {
		f.Add(s, "")
	}
	f.Fuzz(func(t *testing.T, token, scope string) {
		check := func(p []byte, err error) {
			if err == nil {
				require.True(t, payloads[string(p)], "an accepted token carries a payload this keyring sealed or signed")
				return
			}
			var se *secrets.Error
			require.True(t, errors.As(err, &se), "a *secrets.Error: %v", err)
			require.NotEmpty(t, se.Code)
		}
		check(k.Open(token, scope))
		check(k.Verify(token, scope))
		if kid, err := secrets.KidOf(token); err == nil {
			require.NotEmpty(t, kid)
		} else {
			require.True(t, strings.Contains(err.Error(), string(secrets.CodeMalformed)))
		}
		_, _ = secrets.Parse([]byte(token))
		_ = secrets.IsProtected([]byte(token))
	})
}
