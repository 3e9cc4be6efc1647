package main_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestBinarySmoke builds the command and runs it: a usage error exits 2,
// --version prints the build's version, reset --help reset's usage,
// describe of an application with committed offsets exits 0 and lists its
// input partitions, with the brokers taken from $KAFKA_BROKERS.
func TestBinarySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "flechtwerk")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	cmd := exec.Command(bin, "frobnicate")
	out, err = cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "want an exit error, got %v: %s", err, out)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), `unknown command "frobnicate"`)

	out, err = exec.Command(bin, "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `^flechtwerk (devel|v\S+)( \(\w+(-dirty)?(, \S+)?\))? go\S+\n$`, string(out))
	out, err = exec.Command(bin, "reset", "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Usage: flechtwerk reset APP [flags]")

	c := kafkatest.New(t)
	in, app := kafkatest.Name("in"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: in, Partition: 1, At: 0, LeaderEpoch: -1})
	require.NoError(t, c.Adm.CommitAllOffsets(ctx, app, os))

	cmd = exec.Command(bin, "describe", app)
	cmd.Env = append(cmd.Environ(), "KAFKA_BROKERS="+strings.Join(c.Brokers, ","))
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "inputs "+in)
	require.Contains(t, string(out), app+"-1")
}
