package integration

import (
	"context"
	"fmt"
	"github.com/flechtwerk/flechtwerk"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// envInputs returns n records of topic over keys k0..k(keys-1), key i%keys
// on partition (i%keys)%partitions, values prefix0..prefix(n-1).
func envInputs(topic, prefix string, n, keys int, partitions int32) []*kgo.Record {
	recs := inputs(topic, n, keys, partitions)
	for _, r := range recs {
		r.Value = append([]byte(prefix), r.Value...)
	}
	return recs
}

// requireContinues checks outputs of echoCounter: every record of each
// run in runs (the inputs of one run, in produce order, one partition per
// key) has exactly one output, and its count continues the counts of the
// runs before it: state survived, nothing doubled, nothing lost.
func requireContinues(t *testing.T, outs []*kgo.Record, runs ...[]*kgo.Record) {
	t.Helper()
	want := map[string]string{}
	perKey := map[string]int{}
	total := 0
	for _, ins := range runs {
		for _, r := range ins {
			perKey[string(r.Key)]++
			want[string(r.Value)] = fmt.Sprintf("%s#%d", r.Value, perKey[string(r.Key)])
			total++
		}
	}
	got := map[string]string{}
	for _, r := range outs {
		v, _, ok := strings.Cut(string(r.Value), "#")
		require.True(t, ok, "output %q is not value#count", r.Value)
		require.NotContains(t, got, v, "duplicate output for input %s: %s and %s", v, got[v], r.Value)
		got[v] = string(r.Value)
	}
	require.Equal(t, want, got, "outputs carry their input's position per key across runs")
	require.Len(t, outs, total)
}

// TestUnwritableStateDir starts a stateful runner whose state directory
// cannot be created (its parent is a regular file: root bypasses mode bits,
// a file does not). Run ends with an error naming the directory, within a
// bounded time, and nothing is visible: no output, no committed offset. A
// restart with a usable directory then processes every input exactly once.
func TestUnwritableStateDir(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions = 2
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	ins := envInputs(in, "a", 40, 6, partitions)
	c.Produce(t, ins...)

	file := filepath.Join(t.TempDir(), "not-a-dir")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	bad := filepath.Join(file, "state")
	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(bad), runner.WithKafkaOpts(c.Opts()...))
	err := rn.wait(t, 60*time.Second)
	t.Logf("Run with state dir under a file: %v", err)
	require.Error(t, err)
	require.Contains(t, err.Error(), file, "the error names the directory")
	require.Empty(t, readStable(t, c, out), "nothing visible")
	require.Empty(t, c.CommittedOffsets(t, app, in), "no offset committed")

	rn = start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.WithKafkaOpts(c.Opts()...))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	requireContinues(t, readStable(t, c, out), ins)
}

// silentBroker accepts connections and never answers: a broker that hangs
// or a network path that swallows everything after the handshake. It is
// closed when the test ends.
func silentBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestBrokersUnreachableAtStartup starts a runner whose seed broker cannot
// be used, refusing connections or accepting them and never answering: Run
// ends with an error naming the broker within a bounded time (no hang:
// about 40s for the silent broker, kgo's default timeouts).
// Started again with the right brokers, it processes every input exactly
// once.
func TestBrokersUnreachableAtStartup(t *testing.T) {
	t.Parallel() // the silent broker takes kgo's request timeouts (about 40s) to give up
	c := kafkatest.New(t)
	for _, tc := range []struct {
		name   string
		broker string
	}{
		{"connection refused", "127.0.0.1:1"},
		{"silent broker", silentBroker(t)},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 1)
			c.CreateTopic(t, out, 1)
			ins := envInputs(in, "a", 20, 4, 1)
			c.Produce(t, ins...)

			r, err := runner.NewTransformer(echoCounter(out, nil), runner.SeedBrokers(tc.broker), runner.ApplicationID(app),
				runner.InputTopics(in), runner.StateDir(t.TempDir()), runner.WithLogger(logger(t)))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			began := time.Now()
			err = r.Run(ctx)
			took := time.Since(began)
			t.Logf("Run with seed broker %s (%s) ended after %v: %v", tc.broker, tc.name, took, err)
			require.Error(t, err)
			require.NoError(t, ctx.Err(), "Run ended on its own, not by the test's deadline")
			require.Contains(t, err.Error(), tc.broker, "the error names the unreachable broker")

			rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
				runner.StateDir(t.TempDir()), runner.WithKafkaOpts(c.Opts()...))
			waitCommitted(t, c, app, in, 60*time.Second, rn.done)
			require.NoError(t, rn.stop(t))
			requireContinues(t, readStable(t, c, out), ins)
		})
	}
}

// TestInputTopicDeletedWhileRunning deletes the input topic under a running
// runner: Run ends with an error naming the topic within a bounded time,
// and what is visible is exactly the inputs processed before. After the
// topic is recreated (and the group's offsets of the deleted topic are
// dropped with it), a restart resumes: the new inputs are processed exactly
// once and the state continues.
func TestInputTopicDeletedWhileRunning(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions = 2
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	first := envInputs(in, "a", 40, 6, partitions)
	c.Produce(t, first...)
	dir := t.TempDir()
	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(dir), runner.WithKafkaOpts(c.Opts()...))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Adm.DeleteTopic(ctx, in)
	require.NoError(t, err)
	err = rn.wait(t, 120*time.Second)
	t.Logf("Run after its input topic was deleted: %v", err)
	require.Error(t, err)
	require.Contains(t, err.Error(), in, "the error names the topic")
	requireContinues(t, readStable(t, c, out), first)

	// The fix: recreate the topic; the committed offsets of the old one
	// are meaningless for it.
	_, err = c.Adm.DeleteOffsets(ctx, app, kadm.TopicsSet{in: {0: {}, 1: {}}})
	if err != nil {
		t.Logf("deleting the group's offsets of %s: %v", in, err)
	}
	kafkatest.WaitFor(t, 30*time.Second, "recreating "+in, func() bool {
		_, err := c.Adm.CreateTopic(ctx, partitions, -1, nil, in)
		return err == nil
	})
	c.WaitTopic(t, in, partitions)
	second := envInputs(in, "b", 40, 6, partitions)
	c.Produce(t, second...)
	rn = start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(dir), runner.WithKafkaOpts(c.Opts()...))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	requireContinues(t, readStable(t, c, out), first, second)
}

// changelogDeleted runs a stateful runner, deletes its changelog while it
// runs and produces more: the next commit cannot write state, so Run must
// end with an error naming the changelog within a bounded time, and what is
// visible is exactly the inputs processed before (nothing of the failed
// batch). It returns the names, the state dir and both input sets.
func changelogDeleted(t *testing.T, c *kafkatest.Cluster) (in, out, app, dir string, first, second []*kgo.Record) {
	t.Helper()
	in, out, app = kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions = 2
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	first = envInputs(in, "a", 40, 6, partitions)
	c.Produce(t, first...)
	dir = t.TempDir()
	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(dir), runner.WithKafkaOpts(c.Opts()...))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	offsets := c.CommittedOffsets(t, app, in)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Adm.DeleteTopic(ctx, changelog.Topic(app))
	require.NoError(t, err)
	second = envInputs(in, "b", 40, 6, partitions)
	c.Produce(t, second...)
	err = rn.wait(t, 120*time.Second)
	t.Logf("Run after its changelog was deleted: %v", err)
	require.Error(t, err)
	require.Contains(t, err.Error(), changelog.Topic(app), "the error names the changelog")
	requireContinues(t, readStable(t, c, out), first)
	require.Equal(t, offsets, c.CommittedOffsets(t, app, in), "no offset of the failed batch committed")
	return in, out, app, dir, first, second
}

// TestChangelogDeletedWhileRunning: see changelogDeleted.
func TestChangelogDeletedWhileRunning(t *testing.T) {
	changelogDeleted(t, kafkatest.New(t))
}

// TestChangelogDeletedRestartKeepsState restarts the runner after its
// changelog was deleted, on the same state directory. The state of the
// committed offsets is gone from Kafka (the local stores' checkpoints name
// the deleted topic, so they are wiped), so the restart must either refuse
// with an error naming the changelog, or continue the counts; it must not
// count from an empty state while the group's offsets continue.
//
// Run refuses with CHANGELOG_MISSING: the group has committed offsets but
// the state they account for is gone.
func TestChangelogDeletedRestartKeepsState(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app, dir, first, second := changelogDeleted(t, c)
	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(dir), runner.WithKafkaOpts(c.Opts()...))
	select {
	case err := <-rn.done:
		t.Logf("restart after the changelog was deleted: %v", err)
		require.Error(t, err)
		require.Contains(t, err.Error(), changelog.Topic(app))
		require.ErrorIs(t, err, flechtwerk.ErrChangelogMissing)
		require.Len(t, readStable(t, c, out), len(first), "nothing visible of the refused restart")
	case <-time.After(20 * time.Second):
		waitCommitted(t, c, app, in, 60*time.Second, rn.done)
		require.NoError(t, rn.stop(t))
		requireContinues(t, readStable(t, c, out), first, second)
	}
}
