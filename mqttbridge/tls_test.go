package mqttbridge_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/mqtttest"
	"github.com/flechtwerk/flechtwerk/mqttbridge"
	"github.com/flechtwerk/flechtwerk/runner"
)

// testCA is a throw-away certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate for name (server: with its IP SAN).
func (ca *testCA) issue(t *testing.T, name string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestMutualTLS runs the bridge against an embedded broker that requires
// a client certificate: with one it forwards, without one Run ends with
// the connect error.
func TestMutualTLS(t *testing.T) {
	c := kafkatest.New(t)
	ca := newCA(t)
	broker := mqtttest.Embedded(t, &tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, "broker", true)},
		ClientCAs:    ca.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	topic := kafkatest.Name("tls")
	setConfig(t, c, cfgTopic, "k", topic, false)

	rn := start(t, c, broker, app, "mtls", cfgTopic, out, mqttbridge.TLS(&tls.Config{
		RootCAs: ca.pool, Certificates: []tls.Certificate{ca.issue(t, "bridge", false)}, MinVersion: tls.VersionTLS12}))
	pub := mqtttest.NewTLSPublisher(t, broker, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.issue(t, "pub", false)}})
	pub.Publish(t, topic, []byte("secret"))
	require.Equal(t, 1, waitValues(t, c, out, 1)["secret"])
	rn.stop(t)

	// Without a client certificate the connect fails and Run ends.
	b := mqttbridge.New(filterOf, relayTo(out), mqttbridge.Broker(broker), mqttbridge.ClientID("nocert"),
		mqttbridge.ConnectTimeout(5*time.Second), mqttbridge.TLS(&tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}))
	r, err := runner.NewBridge(b, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.WithKafkaOpts(c.Opts()...))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorContains(t, err, "connect to "+broker)
	require.Error(t, r.Ready())
}
