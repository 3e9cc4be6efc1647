package mqttbridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/mqtttest"
	"github.com/flechtwerk/flechtwerk/mqttbridge"
)

// TestForwardsEveryMessageAndAcknowledges publishes to two devices' topics
// under one wildcard config: every message reaches Kafka once, and once
// committed nothing is pending acknowledgement.
func TestForwardsEveryMessageAndAcknowledges(t *testing.T) {
	c := kafkatest.New(t)
	broker := mqtttest.Broker(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 3)
	base := kafkatest.Name("dev")
	setConfig(t, c, cfgTopic, "devices", base+"/+/temp", false)
	rn := start(t, c, broker, app, "bridge-1", cfgTopic, out)
	require.Equal(t, 1.0, rn.metric(t, "flechtwerk_mqtt_connected", nil))

	pub := mqtttest.NewPublisher(t, broker)
	const n = 200
	for i := range n {
		pub.Publish(t, fmt.Sprintf("%s/d%d/temp", base, i%2), fmt.Appendf(nil, "m%d", i))
	}
	got := waitValues(t, c, out, n)
	for i := range n {
		require.Equal(t, 1, got[fmt.Sprintf("m%d", i)], "m%d", i)
	}
	kafkatest.WaitFor(t, 10*time.Second, "acknowledged", func() bool {
		return rn.metric(t, "flechtwerk_mqtt_forwarded_total", nil) == n
	})
	require.Equal(t, float64(n), rn.metric(t, "flechtwerk_mqtt_received_total", map[string]string{"filter": base + "/+/temp"}))
	require.Zero(t, rn.metric(t, "flechtwerk_mqtt_pending_acks", nil))
	require.Zero(t, rn.metric(t, "flechtwerk_mqtt_dropped_total", nil))
	rn.stop(t)
}

// TestPoisonIsCountedAndAcknowledged sends poison and filtered payloads
// between good ones: the good ones all reach Kafka, the others are counted
// by reason, and a restart of the same client id gets none of them again
// (they were acknowledged, not left to wedge the session).
func TestPoisonIsCountedAndAcknowledged(t *testing.T) {
	c := kafkatest.New(t)
	broker := mqtttest.Broker(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	topic := kafkatest.Name("t")
	setConfig(t, c, cfgTopic, "k", topic, false)
	rn := start(t, c, broker, app, "bridge-p", cfgTopic, out)

	pub := mqtttest.NewPublisher(t, broker)
	for i := range 30 {
		switch i % 3 {
		case 0:
			pub.Publish(t, topic, []byte("poison"))
		case 1:
			pub.Publish(t, topic, []byte("skip"))
		default:
			pub.Publish(t, topic, fmt.Appendf(nil, "ok%d", i))
		}
	}
	got := waitValues(t, c, out, 10)
	require.Len(t, got, 10)
	kafkatest.WaitFor(t, 10*time.Second, "drops counted", func() bool {
		return rn.metric(t, "flechtwerk_mqtt_dropped_total", map[string]string{"reason": "poison"}) == 10 &&
			rn.metric(t, "flechtwerk_mqtt_dropped_total", map[string]string{"reason": "filtered"}) == 10 &&
			rn.metric(t, "flechtwerk_mqtt_pending_acks", nil) == 0
	})
	rn.stop(t)

	// The same session again: nothing is delivered twice.
	rn = start(t, c, broker, app, "bridge-p", cfgTopic, out)
	pub.Publish(t, topic, []byte("after"))
	got = waitValues(t, c, out, 11)
	require.Equal(t, 1, got["after"])
	require.Equal(t, 1.0, rn.metric(t, "flechtwerk_mqtt_received_total", nil), "only the new message is received after the restart")
	require.Equal(t, 1.0, rn.metric(t, "flechtwerk_mqtt_session_present", nil), "the broker resumed the session")
	rn.stop(t)
}

// TestLostConnectionEndsRun stops the MQTT broker under a running bridge:
// Run ends with ErrDisconnected (no reconnect in-process), the connected
// gauge drops to 0 and the runner is no longer healthy.
func TestLostConnectionEndsRun(t *testing.T) {
	c := kafkatest.New(t)
	broker, stopBroker := mqtttest.EmbeddedStop(t, nil)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	setConfig(t, c, cfgTopic, "k", kafkatest.Name("t"), false)
	rn := start(t, c, broker, app, "lost", cfgTopic, out)
	require.Zero(t, rn.metric(t, "flechtwerk_mqtt_session_present", nil), "a new session")
	stopBroker()
	select {
	case <-rn.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end after the broker stopped")
	}
	require.ErrorIs(t, rn.err, mqttbridge.ErrDisconnected)
	require.Zero(t, rn.metric(t, "flechtwerk_mqtt_connected", nil))
	require.Error(t, rn.r.Healthy())
}
