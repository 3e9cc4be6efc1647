package mqttbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/mqttbridge"
	"github.com/flechtwerk/flechtwerk/runner"
)

// conf is the tests' config: one MQTT topic filter.
type conf struct {
	Topic string `json:"topic"`
}

func filterOf(c conf) string { return c.Topic }

// relayTo forwards every message to out (key: the MQTT topic, value: the
// payload); "poison" payloads fail, "skip" payloads are dropped.
func relayTo(out string) mqttbridge.Relay[conf] {
	return func(_ mqttbridge.Config[conf], m mqttbridge.Message) (*mqttbridge.Output, error) {
		switch string(m.Payload) {
		case "poison":
			return nil, errors.New("poison payload")
		case "skip":
			return nil, nil
		}
		o := &mqttbridge.Output{Topic: out, Key: []byte(m.Topic), Value: m.Payload}
		if seq, err := strconv.ParseUint(strings.TrimPrefix(string(m.Payload), "m"), 10, 64); err == nil {
			// The publisher's sequence number, for Dedupe.
			o.Headers = []mqttbridge.Header{{Key: mqttbridge.SeqHeader, Value: strconv.AppendUint(nil, seq, 10)}}
		}
		return o, nil
	}
}

func logger() *slog.Logger {
	if os.Getenv("FLECHTWERK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// setConfig writes (or, with an empty topic, tombstones) config key.
func setConfig(t testing.TB, c *kafkatest.Cluster, cfgTopic, key, topic string, suspended bool) {
	t.Helper()
	r := &kgo.Record{Topic: cfgTopic, Key: []byte(key)}
	if topic != "" {
		v, err := json.Marshal(conf{Topic: topic})
		require.NoError(t, err)
		r.Value = v
	}
	if suspended {
		r.Headers = []kgo.RecordHeader{{Key: extractor.SuspendedHeader, Value: []byte("true")}}
	}
	c.Produce(t, r)
}

// running is a bridge's Run in a goroutine.
type running struct {
	r      *runner.Runner
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		require.NoError(t, r.err)
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return")
	}
}

// start runs a bridge of app with client id on cfgTopic, relaying to out.
func start(t testing.TB, c *kafkatest.Cluster, broker, app, clientID, cfgTopic, out string, opts ...mqttbridge.Opt) *running {
	t.Helper()
	return startRelay(t, c, broker, app, clientID, cfgTopic, relayTo(out), opts...)
}

func startRelay(t testing.TB, c *kafkatest.Cluster, broker, app, clientID, cfgTopic string, relay mqttbridge.Relay[conf], opts ...mqttbridge.Opt) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	// Client ids are unique to the test's application: a shared broker
	// (MQTT_BROKER) keeps the sessions of earlier runs.
	b := mqttbridge.New(filterOf, relay, append([]mqttbridge.Opt{mqttbridge.Broker(broker), mqttbridge.ClientID(app + "-" + clientID)}, opts...)...)
	r, err := runner.NewBridge(b,
		runner.SeedBrokers(c.Brokers...),
		runner.ApplicationID(app),
		runner.ConfigTopics(cfgTopic),
		runner.Metrics(reg),
		runner.WithLogger(logger()),
		runner.WithKafkaOpts(c.Opts()...),
	)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{r: r, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rn.done)
		rn.err = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rn.done:
		case <-time.After(30 * time.Second):
		}
	})
	kafkatest.WaitFor(t, 30*time.Second, "bridge ready", func() bool { return r.Ready() == nil })
	return rn
}

// metric sums the samples of name whose labels include want.
func (r *running) metric(t testing.TB, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// values returns the values of recs, counted.
func values(recs []*kgo.Record) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		out[string(r.Value)]++
	}
	return out
}

// waitValues waits up to 60s until out holds at least n distinct
// committed values (copies do not count: a copy must not stand in for a
// message not yet committed) and returns the copies per value; the caller
// checks which values it needs, and so names the missing ones.
func waitValues(t testing.TB, c *kafkatest.Cluster, out string, n int) map[string]int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := values(c.ReadCommitted(t, out))
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}
