package mqttbridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/mqtttest"
)

// TestTwoReplicasShareTheWork runs two replicas of one application on one
// shared subscription: every message reaches Kafka exactly once (no
// crash, so no redelivery), both replicas forward some, and while replica
// b is away the messages the broker dispatched to its session wait for b's
// client id and reach Kafka when it returns.
func TestTwoReplicasShareTheWork(t *testing.T) {
	c := kafkatest.New(t)
	broker := mqtttest.Broker(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 3)
	base := kafkatest.Name("r")
	setConfig(t, c, cfgTopic, "all", base+"/#", false)
	a := start(t, c, broker, app, "a", cfgTopic, out)
	b := start(t, c, broker, app, "b", cfgTopic, out)
	pub := mqtttest.NewPublisher(t, broker)

	const n = 400
	for i := range n {
		pub.Publish(t, fmt.Sprintf("%s/d%d", base, i%8), fmt.Appendf(nil, "m%d", i))
	}
	got := waitValues(t, c, out, n)
	for i := range n {
		require.Equal(t, 1, got[fmt.Sprintf("m%d", i)], "m%d", i)
	}
	kafkatest.WaitFor(t, 10*time.Second, "all acknowledged", func() bool {
		return a.metric(t, "flechtwerk_mqtt_forwarded_total", nil)+b.metric(t, "flechtwerk_mqtt_forwarded_total", nil) == n
	})
	fa, fb := a.metric(t, "flechtwerk_mqtt_forwarded_total", nil), b.metric(t, "flechtwerk_mqtt_forwarded_total", nil)
	require.Positive(t, fa, "replica a forwarded nothing")
	require.Positive(t, fb, "replica b forwarded nothing")
	t.Logf("a forwarded %v, b %v", fa, fb)

	// b goes away (its session stays: no unsubscribe), then comes back.
	b.stop(t)
	for i := n; i < 2*n; i++ {
		pub.Publish(t, fmt.Sprintf("%s/d%d", base, i%8), fmt.Appendf(nil, "m%d", i))
	}
	b = start(t, c, broker, app, "b", cfgTopic, out)
	got = waitValues(t, c, out, 2*n)
	for i := range 2 * n {
		require.Equal(t, 1, got[fmt.Sprintf("m%d", i)], "m%d", i)
	}
	a.stop(t)
	b.stop(t)
}
