package kafkatest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Environment of a secured cluster (integration/kafka/secure.sh writes them
// to its secure.env). They only count together with KAFKA_BROKERS.
const (
	// EnvTLSCA names a PEM file of the CA that signed the brokers'
	// certificates. Setting it makes the cluster Secure: clients dial TLS.
	EnvTLSCA = "KAFKA_TLS_CA"
	// EnvSASLUser and EnvSASLPassword are the SCRAM-SHA-512 credentials
	// of a super user, used by Adm and the helpers of Cluster.
	EnvSASLUser     = "KAFKA_SASL_USER"
	EnvSASLPassword = "KAFKA_SASL_PASSWORD"
)

// NewSecure returns the test's cluster if it is a secured one (TLS, SASL,
// ACLs) and skips the test otherwise, naming what to set.
func NewSecure(t testing.TB) *Cluster {
	t.Helper()
	if os.Getenv("KAFKA_BROKERS") == "" || os.Getenv(EnvTLSCA) == "" ||
		os.Getenv(EnvSASLUser) == "" || os.Getenv(EnvSASLPassword) == "" {
		t.Skipf("needs a secured Kafka (TLS + SASL/SCRAM + StandardAuthorizer): set KAFKA_BROKERS, %s, %s and %s, "+
			"e.g. from the secure.env of `bash integration/kafka/secure.sh start DIR`; `make test-secure` does it",
			EnvTLSCA, EnvSASLUser, EnvSASLPassword)
	}
	return New(t)
}

// Opts returns the franz-go options a client of this cluster needs besides
// the seed brokers: TLS and SASL as the super user on a Secure cluster,
// nothing otherwise. Tests pass them on with runner.WithKafkaOpts.
func (c *Cluster) Opts() []kgo.Opt { return append([]kgo.Opt(nil), c.opts...) }

// UserOpts returns the options of a client that authenticates as user with
// password over TLS (SCRAM-SHA-512). On a cluster that is not Secure it
// returns nil.
func (c *Cluster) UserOpts(user, password string) []kgo.Opt {
	if c.tls == nil {
		return nil
	}
	return []kgo.Opt{
		kgo.DialTLSConfig(c.tls.Clone()),
		kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()),
	}
}

// TLS returns a copy of the TLS configuration of a Secure cluster (trusting
// its CA), or nil.
func (c *Cluster) TLS() *tls.Config {
	if c.tls == nil {
		return nil
	}
	return c.tls.Clone()
}

// CreateUser creates (or resets) the SCRAM-SHA-512 credential of user.
func (c *Cluster) CreateUser(t testing.TB, user, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: password,
	}})
	require.NoError(t, err, "create SCRAM user %s", user)
	require.NoError(t, res.Error(), "create SCRAM user %s", user)
}

// Allow creates the ACLs of b (built with kadm.NewACLs), failing the test
// if the broker rejects any.
func (c *Cluster) Allow(t testing.TB, b *kadm.ACLBuilder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Adm.CreateACLs(ctx, b)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err, "create ACL %s %s %s %s %s", r.Principal, r.Operation, r.Type, r.Name, r.Pattern)
	}
}

// clientOpts returns the seed brokers, the cluster's Opts and extra.
func (c *Cluster) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	out := append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, c.opts...)
	return append(out, extra...)
}

// tlsConfig trusts the CA certificates in the PEM file caFile.
func tlsConfig(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %s: %w", EnvTLSCA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("kafkatest: %s: no PEM certificate in %s", EnvTLSCA, caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
