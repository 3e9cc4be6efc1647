package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/admin"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// adminResult is one run of the admin command.
type adminResult struct {
	code           int
	stdout, stderr string
}

// runAdmin runs the admin command with args and the environment env (the
// only variables it sees).
func runAdmin(t *testing.T, env map[string]string, args ...string) adminResult {
	t.Helper()
	var out, errOut bytes.Buffer
	code := admin.Run(context.Background(), args, admin.Env{
		Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string { return env[k] },
	})
	t.Logf("flechtwerk %s -> %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return adminResult{code, out.String(), errOut.String()}
}

// TestSecureAdmin runs the admin command's describe, reset --dry-run and
// state get against the SASL_SSL broker with TLS (--tls-ca) and
// SCRAM-SHA-512, the password from $FLECHTWERK_SASL_PASSWORD or from
// --sasl-password-file; without TLS, or with a wrong password, it fails.
func TestSecureAdmin(t *testing.T) {
	c := kafkatest.NewSecure(t)
	const partitions, n, keys = 2, 60, 6
	in, out, app := secureTopics(t, c, partitions)
	c.Produce(t, inputs(in, n, keys, partitions)...)
	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.WithKafkaOpts(c.Opts()...))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	ends := c.EndOffsets(t, in)
	c.WaitSettled(t, app+"-changelog")

	user, pass := os.Getenv(kafkatest.EnvSASLUser), os.Getenv(kafkatest.EnvSASLPassword)
	env := map[string]string{
		"KAFKA_BROKERS":            strings.Join(c.Brokers, ","),
		"FLECHTWERK_SASL_USERNAME": user,
		"FLECHTWERK_SASL_PASSWORD": pass,
	}
	secure := []string{"--tls-ca", os.Getenv(kafkatest.EnvTLSCA), "--sasl-mechanism", "SCRAM-SHA-512", "--timeout", "60s"}
	withSecure := func(args ...string) []string { return append(args, secure...) }

	r := runAdmin(t, env, withSecure("describe", app)...)
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "inputs "+in)
	require.Contains(t, r.stdout, app+"-changelog")

	// Offsets back onto kept state: refused, even as a dry run.
	r = runAdmin(t, env, withSecure("reset", app, "--to", "earliest", "--dry-run")...)
	require.Equal(t, admin.ExitError, r.code)
	require.Contains(t, r.stderr, "replay records onto state that already counts them")
	r = runAdmin(t, env, withSecure("reset", app, "--shift-by", "-5", "--state", "--dry-run")...)
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Delete changelog topic "+app+"-changelog")
	require.Contains(t, r.stdout, "dry run: nothing changed")
	require.Equal(t, ends, c.CommittedOffsets(t, app, in), "a dry run changes nothing")

	// The password from a file instead of the environment; k1 is on
	// partition 1 (inputs puts key k on partition k mod partitions).
	pwFile := filepath.Join(t.TempDir(), "password")
	require.NoError(t, os.WriteFile(pwFile, []byte(pass+"\n"), 0o600))
	noPassEnv := map[string]string{"KAFKA_BROKERS": env["KAFKA_BROKERS"]}
	r = runAdmin(t, noPassEnv, withSecure("state", "get", app, "k1", "--partition", "1",
		"--sasl-username", user, "--sasl-password-file", pwFile)...)
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, "10\n", r.stdout, "k1's count")

	wrong := map[string]string{"KAFKA_BROKERS": env["KAFKA_BROKERS"], "FLECHTWERK_SASL_USERNAME": user, "FLECHTWERK_SASL_PASSWORD": pass + "x"}
	r = runAdmin(t, wrong, withSecure("describe", app)...)
	require.Equal(t, admin.ExitError, r.code, "a wrong password is refused")
	require.Contains(t, strings.ToUpper(r.stderr), "SASL")

	r = runAdmin(t, env, "describe", app, "--sasl-mechanism", "SCRAM-SHA-512", "--timeout", "10s")
	require.Equal(t, admin.ExitError, r.code, "without TLS the SASL_SSL listener is not reached")
}
