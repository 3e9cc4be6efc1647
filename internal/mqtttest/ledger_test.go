package mqtttest

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

// recorder collects what the ledger reports.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// ledgerBroker starts a broker with the ledger and at most maxInflight
// messages per session. distributed counts the publishes the broker has
// handed to their subscribers (OnPublished): mochi acknowledges a QoS 1
// publish before it distributes it.
func ledgerBroker(t *testing.T, maxInflight uint16) (url string, led *ledger, distributed *atomic.Int64) {
	t.Helper()
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumInflight = maxInflight
	s := mochi.New(&mochi.Options{Capabilities: caps, Logger: slog.New(slog.DiscardHandler)})
	led = newLedger(s)
	pubs := new(publishedCount)
	require.NoError(t, s.AddHook(new(allowAll), nil))
	require.NoError(t, s.AddHook(led, nil))
	require.NoError(t, s.AddHook(pubs, nil))
	addr := FreeAddr(t)
	require.NoError(t, s.AddListener(listeners.NewTCP(listeners.Config{ID: "t", Address: addr})))
	require.NoError(t, s.Serve())
	t.Cleanup(func() { _ = s.Close() })
	return "tcp://" + addr, led, &pubs.n
}

// publishedCount counts OnPublished.
type publishedCount struct {
	mochi.HookBase
	n atomic.Int64
}

func (*publishedCount) ID() string                                  { return "published-count" }
func (*publishedCount) Provides(b byte) bool                        { return b == mochi.OnPublished }
func (c *publishedCount) OnPublished(*mochi.Client, packets.Packet) { c.n.Add(1) }

// session connects client id with a persistent session that acknowledges
// every message and records its payload in got.
func session(t *testing.T, url, id string, got chan<- string) paho.Client {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(false).SetAutoReconnect(false).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	cl := paho.NewClient(opts)
	tok := cl.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	return cl
}

func TestLedger(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxInflight uint16
		lost        []string // what the ledger must report, one line each
	}{
		{name: "every message carried to the returning session", maxInflight: 16},
		{name: "quota drop of an offline session", maxInflight: 2, lost: []string{"m2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, led, distributed := ledgerBroker(t, tc.maxInflight)
			got := make(chan string, 16)
			sub := session(t, url, "sub", got)
			tok := sub.Subscribe("$share/g/q/#", 1, nil)
			require.True(t, tok.WaitTimeout(10*time.Second))
			require.NoError(t, tok.Error())
			sub.Disconnect(100)

			pub := NewPublisher(t, url)
			for i := range 3 {
				pub.Publish(t, "q/x", fmt.Appendf(nil, "m%d", i))
			}
			// The offline session gets all three (or drops one over its
			// quota) before it is taken over.
			require.Eventually(t, func() bool { return distributed.Load() == 3 }, 10*time.Second, time.Millisecond)
			sub = session(t, url, "sub", got) // takes the session over
			defer sub.Disconnect(100)
			want := 3 - len(tc.lost)
			for range want {
				select {
				case <-got:
				case <-time.After(10 * time.Second):
					t.Fatal("a message the ledger accepts did not arrive")
				}
			}
			time.Sleep(100 * time.Millisecond) // the PUBACKs

			rec := &recorder{TB: t}
			led.check(rec)
			require.Len(t, rec.errs, len(tc.lost), "%v", rec.errs)
			for i, m := range tc.lost {
				require.Contains(t, rec.errs[i], `q/x|`+m+`"`)
				require.True(t, strings.Contains(rec.errs[i], "share group"), rec.errs[i])
			}
		})
	}
}
