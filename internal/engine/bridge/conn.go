package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/flechtwerk/flechtwerk/internal/latch"
)

// errDisconnected is wrapped by the error of a lost connection when the
// Settings name no sentinel of their own.
var errDisconnected = errors.New("mqtt bridge: connection lost")

// conn is the one MQTT connection of a Run: a persistent session (clean
// session off), manual acknowledgement, no reconnects.
type conn struct {
	cl   paho.Client
	wake chan struct{}

	mu    sync.Mutex
	queue []paho.Message // received, not yet drained, in arrival order
	lost  error
}

// dial connects with the settings s; onLost is called once when the
// connection drops. sessionPresent reports whether the broker resumed an
// existing session.
func dial(ctx context.Context, s Settings, wake chan struct{}, onLost func()) (c *conn, sessionPresent bool, err error) {
	c = &conn{wake: wake}
	opts := paho.NewClientOptions().
		AddBroker(s.Broker).
		SetClientID(s.ClientID).
		SetCleanSession(false).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetAutoAckDisabled(true).
		SetOrderMatters(true).
		SetKeepAlive(s.KeepAlive).
		SetConnectTimeout(s.ConnectTimeout).
		SetWriteTimeout(s.ConnectTimeout).
		// Received messages reach the default handler only: every
		// subscription is made without a callback of its own.
		SetDefaultPublishHandler(c.receive).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			c.mu.Lock()
			if c.lost == nil {
				lost := s.Disconnected
				if lost == nil {
					lost = errDisconnected
				}
				c.lost = fmt.Errorf("%w: %v", lost, err)
			}
			c.mu.Unlock()
			onLost()
			latch.Poke(c.wake)
		})
	if s.Username != "" {
		opts.SetUsername(s.Username).SetPassword(s.Password)
	}
	if s.TLS != nil {
		opts.SetTLSConfig(s.TLS)
	}
	c.cl = paho.NewClient(opts)
	tok := c.cl.Connect()
	if err := wait(ctx, tok, s.ConnectTimeout); err != nil {
		c.cl.Disconnect(0)
		return nil, false, fmt.Errorf("mqtt bridge: connect to %s as %s: %w", s.Broker, s.ClientID, err)
	}
	return c, tok.(*paho.ConnectToken).SessionPresent(), nil
}

// receive runs on the client's router goroutine: it must not block.
func (c *conn) receive(_ paho.Client, m paho.Message) {
	c.mu.Lock()
	c.queue = append(c.queue, m)
	c.mu.Unlock()
	latch.Poke(c.wake)
}

// take removes up to n messages from the front of the queue.
func (c *conn) take(n int) []paho.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > len(c.queue) {
		n = len(c.queue)
	}
	out := c.queue[:n:n]
	c.queue = c.queue[n:]
	return out
}

// queued returns how many received messages wait to be drained.
func (c *conn) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// err returns why the connection was lost, nil while it is up.
func (c *conn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// subscribe subscribes filter at qos and waits for the SUBACK.
func (c *conn) subscribe(ctx context.Context, filter string, qos byte, timeout time.Duration) error {
	tok := c.cl.Subscribe(filter, qos, nil)
	if err := wait(ctx, tok, timeout); err != nil {
		return fmt.Errorf("mqtt bridge: subscribe %s: %w", filter, err)
	}
	if st, ok := tok.(*paho.SubscribeToken); ok {
		for _, code := range st.Result() {
			if code == 0x80 {
				return fmt.Errorf("mqtt bridge: subscribe %s: the broker refused the subscription", filter)
			}
		}
	}
	return nil
}

// unsubscribe unsubscribes filters and waits for the UNSUBACK.
func (c *conn) unsubscribe(ctx context.Context, timeout time.Duration, filters ...string) error {
	if err := wait(ctx, c.cl.Unsubscribe(filters...), timeout); err != nil {
		return fmt.Errorf("mqtt bridge: unsubscribe %v: %w", filters, err)
	}
	return nil
}

// close disconnects plainly: the session and everything unacknowledged in
// it stays with the broker for the next connection of the client id.
func (c *conn) close() { c.cl.Disconnect(250) }

func wait(ctx context.Context, tok paho.Token, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("no answer within %v", timeout)
	}
}
