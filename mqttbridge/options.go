package mqttbridge

import (
	"crypto/tls"
	"time"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/engine/bridge"
)

// Opt is an option of a Bridge.
type Opt interface{ apply(*bridge.Settings) }

type opt func(*bridge.Settings)

func (o opt) apply(s *bridge.Settings) { o(s) }

// Broker sets the MQTT broker's URL: tcp://host:port, ssl://host:port (TLS;
// tls:// too), ws:// or wss://. Required.
func Broker(url string) Opt { return opt(func(s *bridge.Settings) { s.Broker = url }) }

// ClientID sets the MQTT client id: the identity of the persistent
// session. Required; it must be unique per instance and stable across
// restarts (a StatefulSet pod name): only the same client id resumes the
// messages a crashed instance left unacknowledged. It also names the
// bridge's transactional ID, {application id}-mqtt-{client id}, so a
// restarted instance fences its previous incarnation.
func ClientID(id string) Opt { return opt(func(s *bridge.Settings) { s.ClientID = id }) }

// QoS sets the QoS of the subscriptions. Default 1. At 0 the broker keeps
// nothing for the bridge: a message in flight when it stops is lost.
func QoS(q byte) Opt { return opt(func(s *bridge.Settings) { s.QoS = q }) }

// Credentials sets the user name and password of the connection. Default:
// none.
func Credentials(user, password string) Opt {
	return opt(func(s *bridge.Settings) { s.Username, s.Password = user, password })
}

// TLS sets the TLS configuration of an ssl://, tls:// or wss:// broker:
// RootCAs to trust the broker, Certificates for mutual TLS, ServerName when
// the URL's host is not the certificate's. Default: the system roots.
func TLS(c *tls.Config) Opt { return opt(func(s *bridge.Settings) { s.TLS = c }) }

// KeepAlive sets the MQTT keep-alive interval. Default 30s.
func KeepAlive(d time.Duration) Opt { return opt(func(s *bridge.Settings) { s.KeepAlive = d }) }

// ConnectTimeout bounds the connect and each SUBSCRIBE or UNSUBSCRIBE.
// Default 10s.
func ConnectTimeout(d time.Duration) Opt {
	return opt(func(s *bridge.Settings) { s.ConnectTimeout = d })
}

// MaxBatch bounds the messages relayed in one cycle, and so the records
// of one transaction. Default 1000.
func MaxBatch(n int) Opt { return opt(func(s *bridge.Settings) { s.MaxBatch = n }) }

// ConfigDecoder sets the decoder of the config records' values. Default:
// configtopic.JSON[C](). Its type must be the bridge's config type C.
func ConfigDecoder[C any](d configtopic.Decoder[C]) Opt { return decoderOpt{d} }

type decoderOpt struct{ d any }

func (decoderOpt) apply(*bridge.Settings) {}
