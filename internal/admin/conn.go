package admin

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Environment variables of the connection flags. Secrets are read from a
// file or from the environment, never from the command line.
const (
	EnvBrokers      = "KAFKA_BROKERS"
	EnvSASLUsername = "FLECHTWERK_SASL_USERNAME"
	EnvSASLPassword = "FLECHTWERK_SASL_PASSWORD"
)

// SASL mechanisms of --sasl-mechanism.
var saslMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// conn are the connection flags of every command that talks to Kafka.
type conn struct {
	brokers string

	tls           bool
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsServerName string
	tlsInsecure   bool

	saslMechanism    string
	saslUsername     string
	saslPasswordFile string

	getenv func(string) string
}

// register defines the connection flags on fs; defaults come from env.
func (c *conn) register(fs *flag.FlagSet, env Env) {
	c.getenv = env.Getenv
	brokers := env.Getenv(EnvBrokers)
	if brokers == "" {
		brokers = DefaultBrokers
	}
	fs.StringVar(&c.brokers, "brokers", brokers, "seed brokers, comma separated `HOST:PORT`s (default $KAFKA_BROKERS, else "+DefaultBrokers+")")
	fs.BoolVar(&c.tls, "tls", false, "connect with TLS, trusting the system's CAs (implied by the other --tls-* flags)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM `FILE` of the CA certificates to trust instead of the system's")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM `FILE` of the client certificate (mutual TLS; needs --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM `FILE` of the client certificate's unencrypted private key")
	fs.StringVar(&c.tlsServerName, "tls-server-name", "", "`NAME` to verify the brokers' certificates against (default: the host dialed)")
	fs.BoolVar(&c.tlsInsecure, "tls-insecure-skip-verify", false, "do not verify the brokers' certificates (testing only)")
	fs.StringVar(&c.saslMechanism, "sasl-mechanism", "", "SASL `MECHANISM`: "+strings.Join(saslMechanisms, ", ")+" (default: no SASL)")
	fs.StringVar(&c.saslUsername, "sasl-username", env.Getenv(EnvSASLUsername), "SASL `USER` (default $"+EnvSASLUsername+")")
	fs.StringVar(&c.saslPasswordFile, "sasl-password-file", "", "`FILE` holding the SASL password (default: $"+EnvSASLPassword+")")
}

// connFlag reports whether name is a connection flag (for grouping help).
func connFlag(name string) bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	new(conn).register(fs, Env{Getenv: func(string) string { return "" }})
	return fs.Lookup(name) != nil
}

// usingTLS reports whether any TLS flag is set.
func (c *conn) usingTLS() bool {
	return c.tls || c.tlsCA != "" || c.tlsCert != "" || c.tlsKey != "" || c.tlsServerName != "" || c.tlsInsecure
}

// validate reports every contradiction among the connection flags at once,
// as a usage error, before any file is read.
func (c *conn) validate() error {
	var errs []string
	if len(splitList(c.brokers)) == 0 {
		errs = append(errs, "--brokers is empty")
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		errs = append(errs, "--tls-cert and --tls-key go together")
	}
	if c.tlsInsecure && c.tlsCA != "" {
		errs = append(errs, "--tls-insecure-skip-verify and --tls-ca contradict each other (the CA would not be checked)")
	}
	switch mech := c.saslMechanism; {
	case mech == "":
		// A user from the environment alone is no request for SASL.
		userFlag := c.saslUsername != "" && c.saslUsername != c.getenv(EnvSASLUsername)
		if userFlag || c.saslPasswordFile != "" {
			errs = append(errs, "--sasl-username and --sasl-password-file need --sasl-mechanism")
		}
	case !validMechanism(mech):
		errs = append(errs, fmt.Sprintf("--sasl-mechanism %q: want one of %s", mech, strings.Join(saslMechanisms, ", ")))
	case c.saslUsername == "":
		errs = append(errs, "--sasl-mechanism "+mech+" needs --sasl-username (or $"+EnvSASLUsername+")")
	case c.saslPasswordFile == "" && c.getenv(EnvSASLPassword) == "":
		errs = append(errs, "--sasl-mechanism "+mech+" needs a password: --sasl-password-file or $"+EnvSASLPassword)
	}
	if len(errs) > 0 {
		return usagef("%s", strings.Join(errs, "; "))
	}
	return nil
}

func validMechanism(m string) bool {
	for _, s := range saslMechanisms {
		if strings.EqualFold(m, s) {
			return true
		}
	}
	return false
}

// clientOpts returns the client options of the connection flags: seed brokers,
// TLS and SASL. Files are read here.
func (c *conn) clientOpts() ([]kgo.Opt, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(splitList(c.brokers)...), kgo.ClientID("flechtwerk-admin")}
	var errs []error
	if c.usingTLS() {
		cfg, err := c.tlsConfig()
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.DialTLSConfig(cfg))
		}
	}
	if c.saslMechanism != "" {
		m, err := c.mechanism()
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.SASL(m))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return opts, nil
}

func (c *conn) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.tlsServerName,
		InsecureSkipVerify: c.tlsInsecure, //nolint:gosec // only with --tls-insecure-skip-verify
	}
	var errs []error
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tls-ca: %w", err))
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("--tls-ca %s: no PEM certificate in the file", c.tlsCA))
			}
			cfg.RootCAs = pool
		}
	}
	if c.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", c.tlsCert, c.tlsKey, err))
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	return cfg, errors.Join(errs...)
}

// mechanism returns the SASL mechanism with the password read from
// --sasl-password-file (without its trailing line break) or $FLECHTWERK_SASL_PASSWORD.
func (c *conn) mechanism() (sasl.Mechanism, error) {
	pass := c.getenv(EnvSASLPassword)
	from := "$" + EnvSASLPassword
	if c.saslPasswordFile != "" {
		b, err := os.ReadFile(c.saslPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--sasl-password-file: %w", err)
		}
		pass, from = strings.TrimRight(string(b), "\r\n"), "--sasl-password-file "+c.saslPasswordFile
	}
	if pass == "" {
		return nil, fmt.Errorf("SASL password from %s is empty", from)
	}
	switch strings.ToUpper(c.saslMechanism) {
	case "PLAIN":
		return plain.Auth{User: c.saslUsername, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: c.saslUsername, Pass: pass}.AsSha256Mechanism(), nil
	default: // SCRAM-SHA-512, checked by validate
		return scram.Auth{User: c.saslUsername, Pass: pass}.AsSha512Mechanism(), nil
	}
}
