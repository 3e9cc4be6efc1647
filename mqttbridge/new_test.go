package mqttbridge_test

import (
	"crypto/tls"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/mqttbridge"
	"github.com/flechtwerk/flechtwerk/runner"
)

// TestNewReportsEveryProblemWithItsCode builds bridges with bad settings:
// runner.NewBridge reports each problem at once, with its code and field.
func TestNewReportsEveryProblemWithItsCode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     *mqttbridge.Bridge[conf]
		app   string
		codes []*flechtwerk.ConfigError
		field string
	}{
		{"no broker", mqttbridge.New(filterOf, relayTo("o"), mqttbridge.ClientID("c")), "app",
			[]*flechtwerk.ConfigError{flechtwerk.ErrNoMQTTBroker}, "Broker"},
		{"bad scheme", mqttbridge.New(filterOf, relayTo("o"), mqttbridge.Broker("http://h:1"), mqttbridge.ClientID("c")), "app",
			[]*flechtwerk.ConfigError{flechtwerk.ErrNoMQTTBroker}, "Broker"},
		{"no client id", mqttbridge.New(filterOf, relayTo("o"), mqttbridge.Broker("tcp://h:1")), "app",
			[]*flechtwerk.ConfigError{flechtwerk.ErrNoMQTTClientID}, "ClientID"},
		{"qos 3 and batch 0", mqttbridge.New(filterOf, relayTo("o"), mqttbridge.Broker("tcp://h:1"), mqttbridge.ClientID("c"),
			mqttbridge.QoS(3), mqttbridge.MaxBatch(0)), "app",
			[]*flechtwerk.ConfigError{flechtwerk.ErrInvalidOption}, "QoS"},
		{"tls on tcp", mqttbridge.New(filterOf, relayTo("o"), mqttbridge.Broker("tcp://h:1"), mqttbridge.ClientID("c"),
			mqttbridge.TLS(&tls.Config{})), "app",
			[]*flechtwerk.ConfigError{flechtwerk.ErrInvalidOption}, "TLS"},
		{"decoder of another type", mqttbridge.New(filterOf, relayTo("o"), mqttbridge.Broker("tcp://h:1"), mqttbridge.ClientID("c"),
			mqttbridge.ConfigDecoder(configtopic.Bytes())), "app",
			[]*flechtwerk.ConfigError{flechtwerk.ErrInvalidOption}, "ConfigDecoder"},
		{"nil relay", mqttbridge.New[conf](filterOf, nil, mqttbridge.Broker("tcp://h:1"), mqttbridge.ClientID("c")), "app",
			[]*flechtwerk.ConfigError{flechtwerk.ErrInvalidTransformer}, "relay"},
		{"share group with a slash", mqttbridge.New(filterOf, relayTo("o"), mqttbridge.Broker("tcp://h:1"), mqttbridge.ClientID("c")), "a/b",
			[]*flechtwerk.ConfigError{flechtwerk.ErrInvalidShareGroup}, "ApplicationID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runner.NewBridge(tc.b, runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID(tc.app), runner.ConfigTopics("cfg"))
			require.Error(t, err)
			for _, code := range tc.codes {
				require.ErrorIs(t, err, code)
			}
			var ce *flechtwerk.ConfigError
			found := false
			for _, e := range unjoin(err) {
				if errors.As(e, &ce) && ce.Field == tc.field {
					found = true
				}
			}
			require.True(t, found, "no error names %s: %v", tc.field, err)
		})
	}

	t.Run("bridge options are checked with the runner's", func(t *testing.T) {
		_, err := runner.NewBridge(mqttbridge.New(filterOf, relayTo("o")), runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"),
			runner.TransactionTimeout(0))
		require.ErrorIs(t, err, flechtwerk.ErrNoMQTTBroker)
		require.ErrorIs(t, err, flechtwerk.ErrNoMQTTClientID)
		require.ErrorIs(t, err, flechtwerk.ErrNoConfigTopics)
		require.ErrorIs(t, err, flechtwerk.ErrInvalidOption) // TransactionTimeout(0)
	})
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}
