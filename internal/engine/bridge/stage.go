package bridge

import (
	"crypto/tls"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// Message is one MQTT message as the engine hands it to the relay; it
// converts to mqttbridge.Message (the same fields).
type Message struct {
	Topic     string
	Payload   []byte
	QoS       byte
	Duplicate bool
	Retained  bool
}

// Settings are the MQTT connection settings of a bridge.
type Settings struct {
	// Broker is the broker's URL: tcp://host:port, ssl://host:port (or
	// tls://), ws:// or wss://.
	Broker string
	// ClientID names the persistent session.
	ClientID           string
	Username, Password string
	// TLS configures ssl://, tls:// and wss:// connections; nil uses the
	// system roots.
	TLS            *tls.Config
	QoS            byte
	KeepAlive      time.Duration
	ConnectTimeout time.Duration
	// MaxBatch bounds the messages relayed in one cycle (one transaction).
	MaxBatch int
	// Disconnected is wrapped by the error that ends Run when the
	// connection is lost (mqttbridge.ErrDisconnected). Nothing received
	// since the last acknowledgement was acknowledged: the broker keeps it
	// in the session of the client id and delivers it again when that
	// client id reconnects.
	Disconnected error
}

// Stage is the engine's view of a bridge.
type Stage interface {
	// Validate reports a problem found when the bridge was built.
	Validate() error
	// Settings returns the MQTT connection settings.
	Settings() Settings
	// DecodeConfig returns the decoder of the config records' values.
	DecodeConfig() configtopic.Decoder[any]
	// Filter returns the topic filter a live config declares and whether
	// the config is active (not suspended); an error names the record.
	Filter(e configtopic.Entry[any]) (filter string, active bool, err error)
	// Relay turns one message into at most one record (nil: dropped),
	// whose Partition is -1 (the partitioner) or its explicit partition.
	// A defect of the relay (a panic, a record without a topic) is
	// returned as a *DefectError; any other error marks a poison message.
	Relay(e configtopic.Entry[any], m Message) (*kgo.Record, error)
}

// DefectError is a relay's defect, not a message's: it ends Run before
// anything of the batch is acknowledged.
type DefectError struct{ Err error }

func (e *DefectError) Error() string { return "relay defect: " + e.Err.Error() }
func (e *DefectError) Unwrap() error { return e.Err }

// Of returns the engine view of v when v is a bridge (a user-facing
// bridge embeds a stage.Handle whose view is a Stage).
func Of(v any) (Stage, bool) {
	view, _ := stage.ViewOf(v)
	s, ok := view.(Stage)
	return s, ok
}
