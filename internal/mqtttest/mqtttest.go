package mqtttest

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

// EnvBroker names an external broker for the tests (tcp://host:port).
const EnvBroker = "MQTT_BROKER"

// Broker returns the URL of the test's MQTT broker: MQTT_BROKER, or an
// embedded broker started for the test.
func Broker(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvBroker); u != "" {
		return u
	}
	return Embedded(t, nil)
}

// External reports whether the tests run against MQTT_BROKER.
func External() bool { return os.Getenv(EnvBroker) != "" }

// Embedded starts an embedded broker on a free loopback port (TLS with tc
// when not nil) and returns its URL; it stops when the test ends.
func Embedded(t testing.TB, tc *tls.Config) string {
	t.Helper()
	url, _ := EmbeddedStop(t, tc)
	return url
}

// EmbeddedStop is Embedded that also returns a function stopping the
// broker at once (every connection drops).
func EmbeddedStop(t testing.TB, tc *tls.Config) (string, func()) {
	t.Helper()
	addr := FreeAddr(t)
	s := mochi.New(&mochi.Options{
		InlineClient: false,
		Logger:       slog.New(slog.DiscardHandler),
	})
	require.NoError(t, s.AddHook(new(allowAll), nil))
	require.NoError(t, s.AddHook(new(takeoverGuard), nil))
	led := newLedger(s)
	require.NoError(t, s.AddHook(led, nil))
	require.NoError(t, s.AddListener(listeners.NewTCP(listeners.Config{ID: "t", Address: addr, TLSConfig: tc})))
	require.NoError(t, s.Serve())
	var once sync.Once
	stop := func() { once.Do(func() { _ = s.Close() }) }
	url := "tcp://" + addr
	if tc != nil {
		url = "ssl://" + addr
	}
	ledgers.Store(url, led)
	t.Cleanup(func() {
		led.check(t)
		stop()
		ledgers.Delete(url)
	})
	return url, stop
}

// FreeAddr returns a loopback address with a port free at the call.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// Publisher is a clean-session QoS 1 publisher.
type Publisher struct {
	cl paho.Client
}

// NewPublisher connects a publisher to url; it disconnects when the test
// ends.
func NewPublisher(t testing.TB, url string) *Publisher {
	t.Helper()
	return NewTLSPublisher(t, url, nil)
}

// NewTLSPublisher connects a publisher to url with the TLS config tc (nil:
// none); it disconnects when the test ends.
func NewTLSPublisher(t testing.TB, url string, tc *tls.Config) *Publisher {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("pub-%d", time.Now().UnixNano())).
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(false).SetWriteTimeout(10 * time.Second)
	if tc != nil {
		opts.SetTLSConfig(tc)
	}
	cl := paho.NewClient(opts)
	tok := cl.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second), "connect publisher")
	require.NoError(t, tok.Error())
	t.Cleanup(func() { cl.Disconnect(100) })
	return &Publisher{cl: cl}
}

// Publish publishes payload to topic at QoS 1 and waits for the PUBACK.
func (p *Publisher) Publish(t testing.TB, topic string, payload []byte) {
	t.Helper()
	tok := p.cl.Publish(topic, 1, false, payload)
	require.True(t, tok.WaitTimeout(10*time.Second), "publish to %s", topic)
	require.NoError(t, tok.Error())
}

// PublishAsync publishes payload to topic at QoS 1 and returns the token.
func (p *Publisher) PublishAsync(topic string, payload []byte) paho.Token {
	return p.cl.Publish(topic, 1, false, payload)
}

// allowAll lets every client connect and use every topic.
type allowAll struct{ mochi.HookBase }

func (*allowAll) ID() string { return "allow-all" }

func (*allowAll) Provides(b byte) bool {
	return b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}

func (*allowAll) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }

func (*allowAll) OnACLCheck(*mochi.Client, string, bool) bool { return true }

// takeoverGuard keeps publishes out of a session takeover. mochi-mqtt
// v2.7.9 moves a persistent session to the reconnecting client (its
// in-flight messages, its subscriptions) before it registers the new
// client under the client id, and clears the old client's in-flight set:
// a message published in between is routed to the old client, stored in
// its in-flight set after the copy, and lost. It holds each publish's
// distribution (OnPublish to OnPublished) apart from each connect's
// session setup (OnSessionEstablish to OnSessionEstablished, after the
// CONNACK and the resent in-flight messages, so that a message published
// meanwhile is not resent as well). mochi returns without
// OnSessionEstablished when the CONNACK or a resend cannot be written; the
// guard then ends when the client is closed. A publish whose PUBACK cannot
// be written ends without OnPublished and would keep the guard: the tests'
// publishers stay connected while the broker runs.
type takeoverGuard struct {
	mochi.HookBase
	mu sync.RWMutex

	pmu     sync.Mutex
	setting map[*mochi.Client]chan struct{} // connects holding mu
}

func (*takeoverGuard) ID() string { return "takeover-guard" }

func (*takeoverGuard) Provides(b byte) bool {
	return b == mochi.OnPublish || b == mochi.OnPublished || b == mochi.OnSessionEstablish ||
		b == mochi.OnSessionEstablished || b == mochi.OnDisconnect
}

func (g *takeoverGuard) OnPublish(_ *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	g.mu.RLock()
	return pk, nil
}

func (g *takeoverGuard) OnPublished(*mochi.Client, packets.Packet) { g.mu.RUnlock() }

func (g *takeoverGuard) OnSessionEstablish(cl *mochi.Client, _ packets.Packet) {
	g.mu.Lock()
	done := make(chan struct{})
	g.pmu.Lock()
	if g.setting == nil {
		g.setting = map[*mochi.Client]chan struct{}{}
	}
	g.setting[cl] = done
	g.pmu.Unlock()
	go func() { // a connect that fails before OnSessionEstablished
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if cl.Closed() {
					g.release(cl)
					return
				}
			}
		}
	}()
}

func (g *takeoverGuard) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) { g.release(cl) }

func (g *takeoverGuard) OnDisconnect(cl *mochi.Client, _ error, _ bool) { g.release(cl) }

func (g *takeoverGuard) release(cl *mochi.Client) {
	g.pmu.Lock()
	done, held := g.setting[cl]
	delete(g.setting, cl)
	g.pmu.Unlock()
	if held {
		close(done)
		g.mu.Unlock()
	}
}
