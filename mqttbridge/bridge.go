package mqttbridge

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/engine/bridge"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Message is one MQTT message: the concrete topic it was published to
// (not the subscription filter) and its payload.
type Message struct {
	Topic   string
	Payload []byte
	// QoS is the quality of service the message was delivered with.
	QoS byte
	// Duplicate is the DUP flag: the broker may have delivered it before.
	Duplicate bool
	// Retained reports a retained message (sent when the subscription was
	// made).
	Retained bool
}

// Config is the config record a message was routed by: the record as read
// from the config topic and its decoded value.
type Config[C any] = configtopic.Entry[C]

// Output is the record a relay makes of a message. It goes to the
// partition set by ToPartition, else to the one chosen by hashing Key with
// Kafka's default (murmur2) partitioner (records without a key stick to
// a partition per produce batch). A partition its topic does not have
// fails the batch's transaction with an *flechtwerk.OutputError
// (flechtwerk.CodeOutputPartition): Run ends and nothing of the batch is
// acknowledged, so the broker delivers it again; a negative one is a
// defect of the relay (see Relay). Its Timestamp is the record's (the
// zero time: the produce time).
type Output = transformer.Output

// Header is a Kafka record header (the same type as flechtwerk.Header).
type Header = flechtwerk.Header

// Relay turns one MQTT message into at most one Kafka record:
//   - a record: forwarded; the message is acknowledged once the transaction
//     holding the record committed;
//   - nil and no error: dropped (counted as "filtered") and acknowledged
//     with its batch;
//   - an error: a poison message, logged, counted as "poison" and
//     acknowledged with its batch. Crashing instead would make the broker
//     deliver it again after every restart.
//   - a panic, or a record without a topic: a defect of the relay, not of
//     the message. Run ends with it (a *flechtwerk.PanicError, or an
//     error naming the MQTT topic) and nothing of the batch is
//     acknowledged, so no message is lost to a bug; the broker delivers
//     the batch again to the fixed relay.
//
// A batch's PUBACKs leave in arrival order once its transaction committed
// (at once when it holds no record).
//
// Relay runs on the bridge's one cycle goroutine, for the messages of a
// batch in arrival order. cfg and msg belong to the call.
type Relay[C any] func(cfg Config[C], msg Message) (*Output, error)

// ErrDisconnected is wrapped by the error that ends Run when the MQTT
// connection is lost. The bridge does not reconnect in-process: every
// message received since the last acknowledgement stays unacknowledged in
// the persistent session of the client id, and the broker delivers it
// again when that client id connects again (restart the process).
var ErrDisconnected = errors.New("mqtt bridge: connection lost")

// Bridge is an MQTT→Kafka bridge stage: runner.NewBridge runs it. Build it with
// New.
type Bridge[C any] struct {
	handle
	filter  func(C) string
	relay   Relay[C]
	decoder configtopic.Decoder[C]
	s       bridge.Settings
	errs    []error
}

// New returns a bridge whose configs (records of the runner's
// ConfigTopics, decoded as JSON into C unless ConfigDecoder says
// otherwise) each declare one MQTT topic filter, returned by filter, and
// whose messages relay turns into records. Broker and ClientID are
// required. Problems are reported by Validate (and so by runner.NewBridge).
func New[C any](filter func(C) string, relay Relay[C], opts ...Opt) *Bridge[C] {
	b := &Bridge[C]{filter: filter, relay: relay, decoder: configtopic.JSON[C](), s: bridge.Settings{
		QoS: 1, KeepAlive: 30 * time.Second, ConnectTimeout: 10 * time.Second, MaxBatch: 1000,
		Disconnected: ErrDisconnected,
	}}
	b.handle = stage.NewHandle(engineView[C]{b}, nil)
	for _, o := range opts {
		if d, ok := o.(decoderOpt); ok {
			dec, ok := d.d.(configtopic.Decoder[C])
			if !ok {
				b.errs = append(b.errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "ConfigDecoder",
					"a decoder of %T for a bridge of configs %T", d.d, *new(C)))
				continue
			}
			b.decoder = dec
			continue
		}
		o.apply(&b.s)
	}
	return b
}

// Validate reports every problem of the bridge at once, each a
// *flechtwerk.ConfigError, joined with errors.Join.
func (b *Bridge[C]) Validate() error {
	if b == nil {
		return flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "bridge", "bridge is nil")
	}
	errs := append([]error(nil), b.errs...)
	bad := func(code flechtwerk.Code, field, format string, args ...any) {
		errs = append(errs, flechtwerk.Errorf(code, field, format, args...))
	}
	if b.filter == nil {
		bad(flechtwerk.CodeInvalidTransformer, "filter", "the topic filter function is nil")
	}
	if b.relay == nil {
		bad(flechtwerk.CodeInvalidTransformer, "relay", "the relay function is nil")
	}
	s := b.s
	if s.Broker == "" {
		bad(flechtwerk.CodeNoMQTTBroker, "Broker", "no MQTT broker address")
	} else if u, err := url.Parse(s.Broker); err != nil || u.Host == "" {
		bad(flechtwerk.CodeNoMQTTBroker, "Broker", "%q is not a broker URL (tcp://host:port, ssl://host:port, ws://, wss://)", s.Broker)
	} else {
		switch u.Scheme {
		case "tcp", "mqtt", "ssl", "tls", "mqtts", "tcps", "ws", "wss":
		default:
			bad(flechtwerk.CodeNoMQTTBroker, "Broker", "scheme %q of %q: want tcp, ssl, tls, ws or wss", u.Scheme, s.Broker)
		}
		if s.TLS != nil && (u.Scheme == "tcp" || u.Scheme == "mqtt" || u.Scheme == "ws") {
			bad(flechtwerk.CodeInvalidOption, "TLS", "a TLS config for the plaintext broker URL %q (use ssl:// or wss://)", s.Broker)
		}
	}
	if s.ClientID == "" {
		bad(flechtwerk.CodeNoMQTTClientID, "ClientID",
			"no MQTT client id: the persistent session needs a stable id per instance; only the same id resumes what a crashed instance left unacknowledged")
	} else if len(s.ClientID) > 65535 {
		bad(flechtwerk.CodeNoMQTTClientID, "ClientID", "%d bytes long; at most 65535", len(s.ClientID))
	}
	if s.QoS > 2 {
		bad(flechtwerk.CodeInvalidOption, "QoS", "must be 0, 1 or 2, is %d", s.QoS)
	}
	if s.KeepAlive < time.Second {
		bad(flechtwerk.CodeInvalidOption, "KeepAlive", "must be at least 1s, is %v", s.KeepAlive)
	}
	if s.ConnectTimeout <= 0 {
		bad(flechtwerk.CodeInvalidOption, "ConnectTimeout", "must be positive, is %v", s.ConnectTimeout)
	}
	if s.MaxBatch <= 0 {
		bad(flechtwerk.CodeInvalidOption, "MaxBatch", "must be positive, is %d", s.MaxBatch)
	}
	if (s.Username == "") != (s.Password == "") && s.Username == "" {
		bad(flechtwerk.CodeInvalidOption, "Credentials", "a password without a user name")
	}
	return errors.Join(errs...)
}

// handle ties a *Bridge to its engine view (internal/stage); the alias
// keeps the embedded field unexported.
type handle = stage.Handle

type engineView[C any] struct{ b *Bridge[C] }

func (v engineView[C]) Validate() error { return v.b.Validate() }

func (v engineView[C]) Settings() bridge.Settings { return v.b.s }

func (v engineView[C]) DecodeConfig() configtopic.Decoder[any] { return anyDecoder[C]{v.b.decoder} }

func (v engineView[C]) Filter(e configtopic.Entry[any]) (f string, active bool, err error) {
	susp, err := extractor.Suspended(e.Record)
	if err != nil || susp {
		return "", false, err
	}
	defer func() {
		if p := recover(); p != nil {
			err = flechtwerk.Recovered(p)
		}
	}()
	return v.b.filter(e.Config.(C)), true, nil
}

func (v engineView[C]) Relay(e configtopic.Entry[any], m bridge.Message) (rec *kgo.Record, err error) {
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, &bridge.DefectError{Err: flechtwerk.Recovered(p)}
		}
	}()
	out, err := v.b.relay(Config[C]{Record: e.Record, Config: e.Config.(C)}, Message(m))
	if err != nil || out == nil {
		return nil, err
	}
	if out.Topic == "" {
		return nil, &bridge.DefectError{Err: fmt.Errorf("the relay returned a record without a topic")}
	}
	rec = &kgo.Record{Topic: out.Topic, Partition: -1, Key: out.Key, Value: out.Value, Timestamp: out.Timestamp}
	if p, ok := out.Partition(); ok {
		if p < 0 {
			return nil, &bridge.DefectError{Err: &flechtwerk.OutputError{Code: flechtwerk.CodeOutputPartition, Topic: out.Topic, Partition: p, Partitions: -1}}
		}
		rec.Partition = p
	}
	if len(out.Headers) > 0 {
		rec.Headers = make([]kgo.RecordHeader, len(out.Headers))
		for i, h := range out.Headers {
			rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	return rec, nil
}

type anyDecoder[C any] struct{ d configtopic.Decoder[C] }

func (a anyDecoder[C]) Decode(b []byte) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, flechtwerk.Recovered(p)
		}
	}()
	return a.d.Decode(b)
}
