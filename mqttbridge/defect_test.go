package mqttbridge_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/mqtttest"
	"github.com/flechtwerk/flechtwerk/mqttbridge"
)

// TestRelayDefectEndsRunUnacknowledged: a relay that panics (a bug, not a
// poison message) ends Run with a *flechtwerk.PanicError before anything
// of the batch is acknowledged, and nothing is dropped as poison; the same
// session with a fixed relay receives the message again and forwards it.
func TestRelayDefectEndsRunUnacknowledged(t *testing.T) {
	c := kafkatest.New(t)
	broker := mqtttest.Broker(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	topic := kafkatest.Name("t")
	setConfig(t, c, cfgTopic, "k", topic, false)

	fixed := relayTo(out)
	buggy := func(cfg mqttbridge.Config[conf], m mqttbridge.Message) (*mqttbridge.Output, error) {
		if string(m.Payload) == "crash" {
			var o *mqttbridge.Output
			_ = o.Topic // nil dereference: a defect of the relay
		}
		return fixed(cfg, m)
	}
	rn := startRelay(t, c, broker, app, "defect", cfgTopic, buggy)
	pub := mqtttest.NewPublisher(t, broker)
	pub.Publish(t, topic, []byte("crash"))
	select {
	case <-rn.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end on the relay's panic")
	}
	var pe *flechtwerk.PanicError
	require.ErrorAs(t, rn.err, &pe)
	require.Zero(t, rn.metric(t, "flechtwerk_mqtt_dropped_total", map[string]string{"reason": "poison"}))

	rn = startRelay(t, c, broker, app, "defect", cfgTopic, fixed)
	got := waitValues(t, c, out, 1)
	require.Equal(t, 1, got["crash"], "the unacknowledged message is delivered again to the fixed relay")
	rn.stop(t)
}
