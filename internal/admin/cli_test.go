package admin

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3 go1.26.0"},
		{"work tree", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"},
		}}, "devel (0123abcd-dirty, 2026-12-01T10:00:00Z) go1.26.0"},
		{"clean tree", debug.BuildInfo{Main: debug.Module{}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "false"},
		}}, "devel (0123abcd)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, version(&tc.bi))
		})
	}
}

// runCLI runs the command with an empty environment.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = Run(context.Background(), args, Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }})
	return code, out.String(), errOut.String()
}

func TestVersionFlag(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "version"} {
		code, out, _ := runCLI(arg)
		require.Equal(t, ExitOK, code)
		require.Equal(t, "flechtwerk "+Version()+"\n", out)
	}
}

// TestCommandHelp: --help or -h anywhere on a command's line prints that
// command's usage (its own flags and the connection flags) to stdout.
func TestCommandHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"reset", "--help"}, []string{"Usage: flechtwerk reset APP", "--to-offset N", "--shift-by N", "--by-duration D", "--keep-state"}},
		{[]string{"reset", "app", "--to", "latest", "-h"}, []string{"Usage: flechtwerk reset APP"}},
		{[]string{"describe", "-help"}, []string{"Usage: flechtwerk describe APP", "--input TOPICS"}},
		{[]string{"state", "get", "--help"}, []string{"Usage: flechtwerk state get APP KEY", "--partition N", "--hex"}},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			code, out, errOut := runCLI(tc.args...)
			require.Equal(t, ExitOK, code, errOut)
			for _, w := range append(tc.want, "Connection flags:", "--tls-ca FILE", "--sasl-password-file FILE") {
				require.Contains(t, out, w)
			}
			require.NotContains(t, out, "flechtwerk COMMAND --help", "not the global usage")
			require.NotContains(t, out, "--sasl-password ", "no password flag")
		})
	}
	code, out, _ := runCLI("--help")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "flechtwerk COMMAND --help")
	require.Contains(t, out, "--sasl-mechanism MECHANISM")
}

// TestArgumentsAfterDoubleDash: "--" ends the flags, so a key may start
// with a dash.
func TestArgumentsAfterDoubleDash(t *testing.T) {
	var c common
	fs := newFlags("state get", Env{Getenv: func(string) string { return "" }}, &c)
	pos, err := parse(fs, []string{"app", "--json", "--", "-k", "--x"}, 3, "APP KEY X")
	require.NoError(t, err)
	require.Equal(t, []string{"app", "-k", "--x"}, pos)
	require.True(t, c.json)
}

// writeCA writes a self-signed CA certificate (PEM) and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return path
}

// TestConnectionFlags: the TLS and SASL flags become client options; wrong
// combinations are usage errors naming every problem at once; the
// password comes from a file (without its line break) or the environment.
func TestConnectionFlags(t *testing.T) {
	dir := t.TempDir()
	ca := writeCA(t)
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	pwFile := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("s3cret\r\n"), 0o600))
	emptyFile := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(emptyFile, []byte("\n"), 0o600))

	for _, tc := range []struct {
		name      string
		args      []string
		env       map[string]string
		usage     []string // usage error containing all of these
		err       string   // other error containing this
		tls       bool
		plainPass string // the PLAIN mechanism's password
		mechanism string
	}{
		{name: "plaintext"},
		{name: "tls system roots", args: []string{"--tls"}, tls: true},
		{name: "tls ca", args: []string{"--tls-ca", ca, "--tls-server-name", "kafka.example"}, tls: true},
		{name: "scram from env", args: []string{"--tls-ca", ca, "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-username", "u"},
			env: map[string]string{EnvSASLPassword: "p"}, tls: true, mechanism: "SCRAM-SHA-256"},
		{name: "scram-512 user from env", args: []string{"--sasl-mechanism", "scram-sha-512", "--sasl-password-file", pwFile},
			env: map[string]string{EnvSASLUsername: "u"}, mechanism: "SCRAM-SHA-512"},
		{name: "plain from file", args: []string{"--sasl-mechanism", "PLAIN", "--sasl-username", "u", "--sasl-password-file", pwFile},
			env: map[string]string{EnvSASLPassword: "ignored"}, plainPass: "s3cret", mechanism: "PLAIN"},
		{name: "plain from env", args: []string{"--sasl-mechanism", "PLAIN", "--sasl-username", "u"},
			env: map[string]string{EnvSASLPassword: "envpw"}, plainPass: "envpw", mechanism: "PLAIN"},
		{name: "every problem at once", args: []string{"--tls-cert", "c.pem", "--sasl-mechanism", "GSSAPI", "--brokers", ","},
			usage: []string{"--tls-cert and --tls-key go together", `--sasl-mechanism "GSSAPI"`, "--brokers is empty"}},
		{name: "insecure with ca", args: []string{"--tls-ca", ca, "--tls-insecure-skip-verify"}, usage: []string{"contradict"}},
		{name: "no user", args: []string{"--sasl-mechanism", "PLAIN"}, env: map[string]string{EnvSASLPassword: "p"},
			usage: []string{"needs --sasl-username"}},
		{name: "no password", args: []string{"--sasl-mechanism", "PLAIN", "--sasl-username", "u"},
			usage: []string{"needs a password: --sasl-password-file or $FLECHTWERK_SASL_PASSWORD"}},
		{name: "password file without mechanism", args: []string{"--sasl-password-file", pwFile}, usage: []string{"need --sasl-mechanism"}},
		{name: "empty password file", args: []string{"--sasl-mechanism", "PLAIN", "--sasl-username", "u", "--sasl-password-file", emptyFile},
			err: "is empty"},
		{name: "missing password file", args: []string{"--sasl-mechanism", "PLAIN", "--sasl-username", "u", "--sasl-password-file", filepath.Join(dir, "nope")},
			err: "--sasl-password-file: open"},
		{name: "ca not pem", args: []string{"--tls-ca", notPEM}, err: "no PEM certificate"},
		{name: "bad key pair", args: []string{"--tls-cert", notPEM, "--tls-key", notPEM}, err: "--tls-cert " + notPEM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			var c common
			fs := newFlags("describe", Env{Getenv: getenv}, &c)
			_, err := parse(fs, append([]string{"app"}, tc.args...), 1, "APP")
			require.NoError(t, err)
			opts, err := c.opts()
			switch {
			case tc.usage != nil:
				var ue *usageError
				require.ErrorAs(t, err, &ue)
				for _, u := range tc.usage {
					require.Contains(t, ue.msg, u)
				}
				return
			case tc.err != "":
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.NotEmpty(t, opts)
			require.Equal(t, tc.tls, c.usingTLS())
			if tc.tls {
				cfg, err := c.tlsConfig()
				require.NoError(t, err)
				require.False(t, cfg.InsecureSkipVerify, "verification is on by default")
				require.Equal(t, c.tlsServerName, cfg.ServerName)
				require.Equal(t, c.tlsCA != "", cfg.RootCAs != nil)
			}
			if tc.mechanism == "" {
				return
			}
			m, err := c.mechanism()
			require.NoError(t, err)
			require.Equal(t, tc.mechanism, m.Name())
			if tc.plainPass != "" {
				_, first, err := m.Authenticate(context.Background(), "host:9092")
				require.NoError(t, err)
				require.Equal(t, "\x00u\x00"+tc.plainPass, string(first))
			}
		})
	}
}

// TestResetTargets: one target flag at most; each becomes its option.
func TestResetTargets(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		args  []string
		usage string
		check func(t *testing.T, o ResetOptions)
	}{
		{args: nil, check: func(t *testing.T, o ResetOptions) { require.Equal(t, "earliest", o.To); require.Nil(t, o.At) }},
		{args: []string{"--to", "latest"}, check: func(t *testing.T, o ResetOptions) { require.Equal(t, "latest", o.To) }},
		{args: []string{"--to", "2026-11-30T00:00:00Z"}, check: func(t *testing.T, o ResetOptions) {
			require.Equal(t, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), *o.At)
		}},
		{args: []string{"--to-offset", "7"}, check: func(t *testing.T, o ResetOptions) { require.Equal(t, int64(7), *o.Offset) }},
		{args: []string{"--shift-by", "-3"}, check: func(t *testing.T, o ResetOptions) {
			require.Equal(t, int64(-3), *o.Shift)
			require.Equal(t, "committed offset -3", o.Describe)
		}},
		{args: []string{"--by-duration", "90m"}, check: func(t *testing.T, o ResetOptions) {
			require.Equal(t, now.Add(-90*time.Minute), *o.At)
		}},
		{args: []string{"--to", "yesterday"}, usage: `--to "yesterday"`},
		{args: []string{"--to", "latest", "--to-offset", "1"}, usage: "--to, --to-offset: give one target"},
		{args: []string{"--shift-by", "1", "--by-duration", "1h"}, usage: "give one target"},
		{args: []string{"--to-offset", "-1"}, usage: "want an offset >= 0"},
		{args: []string{"--shift-by", "0"}, usage: "changes nothing"},
		{args: []string{"--by-duration", "-1h"}, usage: "want a positive duration"},
		{args: []string{"--by-duration", "P1D"}, usage: "invalid value"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			var c common
			fs := newFlags("reset", Env{Getenv: func(string) string { return "" }}, &c)
			to := fs.String("to", "earliest", "")
			toOffset := fs.Int64("to-offset", -1, "")
			shiftBy := fs.Int64("shift-by", 0, "")
			byDuration := fs.Duration("by-duration", 0, "")
			_, err := parse(fs, append([]string{"app"}, tc.args...), 1, "APP")
			if err == nil {
				var o ResetOptions
				if o, err = resetOptions(fs, *to, *toOffset, *shiftBy, *byDuration, now); err == nil {
					require.Empty(t, tc.usage)
					tc.check(t, o)
					return
				}
			}
			var ue *usageError
			require.ErrorAs(t, err, &ue)
			require.Contains(t, ue.msg, tc.usage)
		})
	}
	code, _, errOut := runCLI("reset", "app", "--state", "--keep-state")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "--state and --keep-state contradict")
}
