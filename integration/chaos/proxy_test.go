package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// connProxy is a fault-injecting TCP proxy (toxiproxy, run in-process) in
// front of one broker: it listens on the address the broker advertises to
// the processors and forwards to the broker's EXTERNAL listener.
type connProxy struct {
	mu     sync.Mutex // one fault at a time
	p      *toxiproxy.Proxy
	halted bool
}

var (
	toxiOnce   sync.Once
	toxiServer *toxiproxy.ApiServer
)

func newConnProxy(t testing.TB, name, listen, upstream string) *connProxy {
	t.Helper()
	toxiOnce.Do(func() {
		toxiServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	})
	p := toxiproxy.NewProxy(toxiServer, name, listen, upstream)
	require.NoError(t, p.Start(), "proxy %s: listening on %s for %s", name, listen, upstream)
	t.Cleanup(p.Stop)
	return &connProxy{p: p}
}

// cut closes every connection through the proxy (FIN) and refuses new
// ones for gap.
func (cp *connProxy) cut(gap time.Duration) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.halted {
		return nil
	}
	cp.p.Stop()
	time.Sleep(gap)
	return cp.start()
}

// start starts the stopped proxy on its port again.
func (cp *connProxy) start() error {
	// The listener is closed; the port is ours again at once (SO_REUSEADDR).
	var err error
	for range 50 {
		if err = cp.p.Start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("proxy %s: restarting on %s: %w", cp.p.Name, cp.p.Listen, err)
}

// halt stops the proxy until resume: while its broker is dead, dials are
// refused as they would be by the dead broker's port (a proxy that
// accepts and then closes at once makes the client see a first-read EOF,
// which franz-go takes for a TLS misconfiguration and does not retry).
func (cp *connProxy) halt() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.halted = true
	cp.p.Stop()
}

func (cp *connProxy) resume() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.halted = false
	return cp.start()
}

// reset resets (RST) every connection that carries a request during d:
// toxiproxy's reset_peer toxic.
func (cp *connProxy) reset(ctx context.Context, d time.Duration) error {
	return cp.toxic(ctx, d, "reset_peer", map[string]int{"timeout": 0}, "upstream")
}

// stall holds every byte in both directions for d, on open and new
// connections alike, then lets them flow again: a latency toxic longer
// than d, removed after d (removing it releases what it holds at once).
// Not toxiproxy's timeout toxic: with timeout 0 it drops the bytes it
// holds, which cuts a stream in the middle of a request instead of
// stalling it, a fault TCP does not have.
func (cp *connProxy) stall(ctx context.Context, d time.Duration) error {
	return cp.toxic(ctx, d, "latency", map[string]int{"latency": int(d.Milliseconds()) + 60000}, "upstream", "downstream")
}

// latency delays the data in both directions by ms±jitter milliseconds
// for d.
func (cp *connProxy) latency(ctx context.Context, d time.Duration, ms, jitter int) error {
	return cp.toxic(ctx, d, "latency", map[string]int{"latency": ms, "jitter": jitter}, "upstream", "downstream")
}

func (cp *connProxy) toxic(ctx context.Context, d time.Duration, kind string, attrs map[string]int, streams ...string) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var names []string
	defer func() {
		for _, n := range names {
			_ = cp.p.Toxics.RemoveToxic(context.Background(), n)
		}
	}()
	var a []string
	for k, v := range attrs {
		a = append(a, fmt.Sprintf("%q:%d", k, v))
	}
	for _, stream := range streams {
		name := kind + "-" + stream
		spec := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":{%s}}`, name, kind, stream, strings.Join(a, ","))
		if _, err := cp.p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			return fmt.Errorf("proxy %s: adding %s toxic: %w", cp.p.Name, kind, err)
		}
		names = append(names, name)
	}
	sleep(ctx, d)
	return ctx.Err()
}

// startProxies starts one proxy per broker.
func (c *cluster) startProxies(t testing.TB) {
	for _, n := range c.nodes {
		n.proxyCtl = newConnProxy(t, fmt.Sprintf("broker-%d", n.id), n.proxy, n.external)
	}
}
