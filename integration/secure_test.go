package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// grant is one ACL of the minimal set a runner needs (docs/acls.md).
type grant struct {
	name string
	acl  func(principal, app string, in, out []string) *kadm.ACLBuilder
}

// runnerGrants is the minimal ACL set of a stateful transformer runner with
// application id app, inputs in and outputs out, found by experiment on
// Kafka 4.4 (TestSecureEachACLIsNeeded removes each in turn). Read, Write
// imply Describe; the runner needs nothing on the cluster resource: a
// transactional producer's Write on its transactional id covers the
// idempotent write.
var runnerGrants = []grant{
	{"Read on the input topics", func(p, _ string, in, _ []string) *kadm.ACLBuilder {
		return kadm.NewACLs().Allow(p).AllowHosts().Topics(in...).Operations(kadm.OpRead)
	}},
	{"Write on the output topics", func(p, _ string, _, out []string) *kadm.ACLBuilder {
		return kadm.NewACLs().Allow(p).AllowHosts().Topics(out...).Operations(kadm.OpWrite)
	}},
	{"Create on the changelog", func(p, app string, _, _ []string) *kadm.ACLBuilder {
		return kadm.NewACLs().Allow(p).AllowHosts().Topics(changelog.Topic(app)).Operations(kadm.OpCreate)
	}},
	{"DescribeConfigs on the changelog", func(p, app string, _, _ []string) *kadm.ACLBuilder {
		return kadm.NewACLs().Allow(p).AllowHosts().Topics(changelog.Topic(app)).Operations(kadm.OpDescribeConfigs)
	}},
	{"Read on the changelog", func(p, app string, _, _ []string) *kadm.ACLBuilder {
		return kadm.NewACLs().Allow(p).AllowHosts().Topics(changelog.Topic(app)).Operations(kadm.OpRead)
	}},
	{"Write on the changelog", func(p, app string, _, _ []string) *kadm.ACLBuilder {
		return kadm.NewACLs().Allow(p).AllowHosts().Topics(changelog.Topic(app)).Operations(kadm.OpWrite)
	}},
	{"Read on the group", func(p, app string, _, _ []string) *kadm.ACLBuilder {
		return kadm.NewACLs().Allow(p).AllowHosts().Groups(app).Operations(kadm.OpRead)
	}},
	{"Write on the transactional ids with prefix {app}-", func(p, app string, _, _ []string) *kadm.ACLBuilder {
		return kadm.NewACLs().Allow(p).AllowHosts().TransactionalIDs(app + "-").
			ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpWrite)
	}},
}

// principal creates a SCRAM user with the runner's ACLs except those named
// in without, and returns the kgo options of a client logged in as it.
func principal(t *testing.T, c *kafkatest.Cluster, app string, in, out []string, without ...string) []kgo.Opt {
	t.Helper()
	user, pass := kafkatest.Name("user"), kafkatest.Name("pw")
	c.CreateUser(t, user, pass)
	for _, g := range runnerGrants {
		if slices.Contains(without, g.name) {
			continue
		}
		c.Allow(t, g.acl("User:"+user, app, in, out))
	}
	waitUserKnown(t, c, user, pass)
	return c.UserOpts(user, pass)
}

// waitUserKnown waits until the broker accepts user's credential: SCRAM
// credentials and ACLs take effect once the broker applied the metadata.
func waitUserKnown(t *testing.T, c *kafkatest.Cluster, user, pass string) {
	t.Helper()
	kafkatest.WaitFor(t, 20*time.Second, "SCRAM credential of "+user, func() bool {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, c.UserOpts(user, pass)...)...)
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return cl.Ping(ctx) == nil
	})
	time.Sleep(500 * time.Millisecond) // ACLs created after the user are applied too
}

// secureTopics creates an input and an output topic with partitions
// partitions and returns their names and an application id.
func secureTopics(t *testing.T, c *kafkatest.Cluster, partitions int32) (in, out, app string) {
	t.Helper()
	in, out, app = kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	return in, out, app
}

// TestSecureStatefulCount runs the per-key counter through TLS and
// SASL/SCRAM-SHA-512 as a principal holding only runnerGrants: every input
// has exactly one output carrying its position per key, and the committed
// offsets are exact.
func TestSecureStatefulCount(t *testing.T) {
	c := kafkatest.NewSecure(t)
	const partitions, n, keys = 3, 300, 12
	in, out, app := secureTopics(t, c, partitions)
	opts := principal(t, c, app, []string{in}, []string{out})
	ins := inputs(in, n, keys, partitions)
	c.Produce(t, ins...)

	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(41), runner.WithKafkaOpts(opts...))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	requireExactlyOnce(t, ins, readStable(t, c, out))
	requireOffsets(t, c, app, in, c.EndOffsets(t, in))
}

// TestSecureRestartRestores stops the runner and starts it on an empty
// state directory, as the same least-privilege principal: the state is
// restored from the changelog through TLS+SASL and the counts continue.
func TestSecureRestartRestores(t *testing.T) {
	c := kafkatest.NewSecure(t)
	const partitions, keys = 2, 6
	in, out, app := secureTopics(t, c, partitions)
	opts := principal(t, c, app, []string{in}, []string{out})
	first := inputs(in, 60, keys, partitions)
	c.Produce(t, first...)
	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(16), runner.WithKafkaOpts(opts...))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	second := inputs(in, 60, keys, partitions)
	for _, r := range second {
		r.Value = append([]byte("b"), r.Value...)
	}
	c.Produce(t, second...)
	rn = start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(16), runner.WithKafkaOpts(opts...))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
}

// TestSecureZombieFenced opens a transaction with task 0's transactional ID
// as the least-privilege principal (a zombie of task 0 with a record in
// flight), then starts the runner: its task fences the zombie, whose commit
// fails and whose record never becomes visible.
func TestSecureZombieFenced(t *testing.T) {
	c := kafkatest.NewSecure(t)
	in, out, app := secureTopics(t, c, 1)
	opts := principal(t, c, app, []string{in}, []string{out})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	zombie, err := fencing.Init(ctx, fencing.TransactionalID(app, 0), 30*time.Second,
		append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	require.NoError(t, err)
	defer zombie.Close()
	require.NoError(t, zombie.BeginTransaction())
	require.NoError(t, zombie.ProduceSync(ctx, &kgo.Record{Topic: out, Value: []byte("zombie#1")}).FirstErr())

	ins := inputs(in, 20, 4, 1)
	c.Produce(t, ins...)
	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.WithKafkaOpts(opts...))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)

	err = zombie.EndTransaction(ctx, kgo.TryCommit)
	require.Error(t, err, "the zombie's commit after the runner's task started")
	require.NoError(t, rn.stop(t))
	requireExactlyOnce(t, ins, readStable(t, c, out))
}

// requireRefused checks that Run ended with an error naming the kerr code
// want and the missing ACL (acl: "needs ACL <operation> on <resource kind>
// <name>", with the stable code NOT_AUTHORIZED), and that nothing of the run
// is visible: read_committed sees only the outputs before (of an earlier
// run), and the committed offsets are still offsets.
func requireRefused(t *testing.T, c *kafkatest.Cluster, err error, want *kerr.Error, acl, app, in, out string, before int, offsets map[int32]int64) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, want, "Run's error: %v", err)
	require.ErrorIs(t, err, flechtwerk.ErrNotAuthorized, "Run's error: %v", err)
	require.Contains(t, err.Error(), want.Message, "the error names the refused permission")
	require.Contains(t, err.Error(), string(flechtwerk.CodeNotAuthorized)+": not authorized: the principal "+acl, "the error names the missing ACL")
	require.NotContains(t, err.Error(), "lost the consumer group session", "a refused ACL is not a lost session")
	require.Len(t, readStable(t, c, out), before, "read_committed sees nothing of the refused run")
	require.Equal(t, offsets, c.CommittedOffsets(t, app, in), "no offset committed by the refused run")
}

// TestSecureMissingACL runs the runner as principals that each lack one ACL
// of runnerGrants: Run ends, within a bounded time, with the broker's
// authorization error and a message naming the ACL operation and the
// resource the principal needs it on, and nothing of the run is visible.
// The changelog's Read and DescribeConfigs are only used once the changelog
// exists and holds state, so those cases run a first time with every ACL,
// then restart without the one; so does the group case that joins the group
// (a first start without the group ACL fails earlier, reading the group's
// committed offsets to check for a missing changelog).
func TestSecureMissingACL(t *testing.T) {
	c := kafkatest.NewSecure(t)
	for _, tc := range []struct {
		without string
		restart bool // needs a changelog with state: run once with every ACL first
		want    *kerr.Error
		acl     func(in, out, app string) string // the ACL the error must name
	}{
		{"Write on the output topics", false, kerr.TopicAuthorizationFailed,
			func(_, out, _ string) string { return fmt.Sprintf("needs ACL Write on topic %q", out) }},
		{"Write on the transactional ids with prefix {app}-", false, kerr.TransactionalIDAuthorizationFailed,
			func(_, _, app string) string { return `needs ACL Write on transactional-id "` + app + "-" }},
		{"Read on the group", false, kerr.GroupAuthorizationFailed,
			func(_, _, app string) string { return fmt.Sprintf("needs ACL Read on group %q", app) }},
		{"Read on the group", true, kerr.GroupAuthorizationFailed,
			func(_, _, app string) string { return fmt.Sprintf("needs ACL Read on group %q", app) }},
		{"Read on the input topics", false, kerr.TopicAuthorizationFailed,
			func(in, _, _ string) string { return fmt.Sprintf("needs ACL Read on topic %q", in) }},
		{"Write on the changelog", false, kerr.TopicAuthorizationFailed,
			func(_, _, app string) string { return fmt.Sprintf("needs ACL Write on topic %q", changelog.Topic(app)) }},
		{"Create on the changelog", false, kerr.TopicAuthorizationFailed,
			func(_, _, app string) string {
				return fmt.Sprintf("needs ACL Create on topic %q", changelog.Topic(app))
			}},
		{"Read on the changelog", true, kerr.TopicAuthorizationFailed,
			func(_, _, app string) string { return fmt.Sprintf("needs ACL Read on topic %q", changelog.Topic(app)) }},
		{"DescribeConfigs on the changelog", true, kerr.TopicAuthorizationFailed,
			func(_, _, app string) string {
				return fmt.Sprintf("needs ACL DescribeConfigs on topic %q", changelog.Topic(app))
			}},
	} {
		name := strings.ReplaceAll(tc.without, " ", "_")
		if tc.restart {
			name += "_on_restart"
		}
		t.Run(name, func(t *testing.T) {
			in, out, app := secureTopics(t, c, 2)
			c.Produce(t, inputs(in, 20, 4, 2)...)
			before, offsets := 0, map[int32]int64{}
			if tc.restart {
				full := principal(t, c, app, []string{in}, []string{out})
				rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
					runner.StateDir(t.TempDir()), runner.WithKafkaOpts(full...))
				waitCommitted(t, c, app, in, 60*time.Second, rn.done)
				require.NoError(t, rn.stop(t))
				before, offsets = len(readStable(t, c, out)), c.CommittedOffsets(t, app, in)
				c.Produce(t, inputs(in, 20, 4, 2)...)
			}
			opts := principal(t, c, app, []string{in}, []string{out}, tc.without)
			rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
				runner.StateDir(t.TempDir()), runner.WithKafkaOpts(opts...))
			err := rn.wait(t, 90*time.Second)
			t.Logf("without %s: Run: %v", tc.without, err)
			requireRefused(t, c, err, tc.want, tc.acl(in, out, app), app, in, out, before, offsets)
		})
	}
}

// TestSecureWrongPasswordRefused: a client with a wrong password is refused
// at authentication, and a runner with it ends Run with that error.
func TestSecureWrongPasswordRefused(t *testing.T) {
	c := kafkatest.NewSecure(t)
	in, out, app := secureTopics(t, c, 1)
	principal(t, c, app, []string{in}, []string{out})
	user := kafkatest.Name("user")
	c.CreateUser(t, user, "right-password")

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.DialTLSConfig(c.TLS()),
		kgo.SASL(scram.Auth{User: user, Pass: "wrong-password"}.AsSha512Mechanism()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = cl.Ping(ctx)
	require.ErrorIs(t, err, kerr.SaslAuthenticationFailed)

	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.WithKafkaOpts(kgo.DialTLSConfig(c.TLS()),
			kgo.SASL(scram.Auth{User: user, Pass: "wrong-password"}.AsSha512Mechanism())))
	err = rn.wait(t, 60*time.Second)
	t.Logf("Run with a wrong password: %v", err)
	require.ErrorIs(t, err, kerr.SaslAuthenticationFailed)
}

// TestSecurePlaintextRefused: a client that speaks plaintext Kafka to the
// TLS listener gets no answer it can use (the broker drops the connection
// during the TLS handshake), and a client without SASL over TLS is refused.
func TestSecurePlaintextRefused(t *testing.T) {
	c := kafkatest.NewSecure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	plain, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.RequestRetries(0), kgo.RetryTimeout(5*time.Second))
	require.NoError(t, err)
	defer plain.Close()
	err = plain.Ping(ctx)
	t.Logf("plaintext client: %v", err)
	require.Error(t, err)

	// TLS without SASL: the SASL_SSL listener accepts no unauthenticated
	// request.
	noSASL, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.DialTLSConfig(c.TLS()),
		kgo.RequestRetries(0), kgo.RetryTimeout(5*time.Second))
	require.NoError(t, err)
	defer noSASL.Close()
	err = noSASL.Ping(ctx)
	t.Logf("TLS client without SASL: %v", err)
	require.Error(t, err)

	// A TLS client that does not trust the test CA fails the handshake.
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.Brokers[0], &tls.Config{MinVersion: tls.VersionTLS12})
	if conn != nil {
		conn.Close()
	}
	var unknown x509.UnknownAuthorityError
	require.True(t, errors.As(err, &unknown), "handshake without the CA: %v", err)
}

// secureFeed is the config of TestSecureExtractor: Size items to extract.
type secureFeed struct{ Size int }

// securePos is its cursor: the next item.
type securePos struct{ Next int }

// TestSecureExtractor runs an extractor through TLS and SASL as a principal
// holding only runnerGrants (with the config topic as the input): every
// item of every config becomes visible exactly once, in pages committed
// with their cursors; a restart on an empty state directory restores the
// cursors from the changelog and extracts nothing twice.
func TestSecureExtractor(t *testing.T) {
	c := kafkatest.NewSecure(t)
	configs, out, app := secureTopics(t, c, 2)
	opts := principal(t, c, app, []string{configs}, []string{out})
	sizes := map[string]int{"news": 7, "weather": 4, "sport": 5}
	var recs []*kgo.Record
	for k, n := range sizes {
		recs = append(recs, &kgo.Record{Topic: configs, Partition: int32(len(k) % 2), Key: []byte(k),
			Value: fmt.Appendf(nil, `{"Size":%d}`, n)})
	}
	c.Produce(t, recs...)

	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[secureFeed], cur securePos, e *extractor.Emitter[securePos]) error {
		for cur.Next < cfg.Config.Size {
			for i := cur.Next; i < min(cur.Next+2, cfg.Config.Size); i++ {
				e.Send(out, cfg.Key, fmt.Appendf(nil, "%s-%d", cfg.Key, i))
			}
			cur.Next = min(cur.Next+2, cfg.Config.Size)
			if err := e.Commit(ctx, cur); err != nil {
				return err
			}
		}
		return nil
	})
	want := 0
	for _, n := range sizes {
		want += n
	}
	run := func() {
		r, err := runner.NewExtractor(ex, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app),
			runner.ConfigTopics(configs), runner.PollInterval(200*time.Millisecond),
			runner.StateDir(t.TempDir()), runner.SessionTimeout(6*time.Second),
			runner.WithLogger(logger(t)), runner.WithKafkaOpts(opts...))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		kafkatest.WaitFor(t, 60*time.Second, "every item visible", func() bool {
			select {
			case err := <-done:
				t.Fatalf("extractor ended: %v", err)
			default:
			}
			return len(readStable(t, c, out)) >= want
		})
		time.Sleep(time.Second) // a few more polls: they must extract nothing
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Fatal("extractor did not stop within 60s")
		}
	}
	run()
	run() // restored cursors: nothing is extracted again

	got := map[string]int{}
	for _, r := range readStable(t, c, out) {
		got[string(r.Value)]++
	}
	require.Len(t, got, want)
	for k, n := range sizes {
		for i := range n {
			require.Equal(t, 1, got[fmt.Sprintf("%s-%d", k, i)], "item %s-%d", k, i)
		}
	}
}
