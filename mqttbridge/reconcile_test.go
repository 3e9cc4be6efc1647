package mqttbridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/engine/bridge"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/mqtttest"
)

// TestReconcileAddSuspendRemove adds, suspends, resumes and removes
// configs while the bridge runs: a filter's messages reach Kafka exactly
// while an active config declares it.
func TestReconcileAddSuspendRemove(t *testing.T) {
	c := kafkatest.New(t)
	broker := mqtttest.Broker(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	ta, tb := kafkatest.Name("a"), kafkatest.Name("b")
	setConfig(t, c, cfgTopic, "A", ta, false)
	rn := start(t, c, broker, app, "r", cfgTopic, out)
	pub := mqtttest.NewPublisher(t, broker)
	subs := func(n float64) {
		t.Helper()
		kafkatest.WaitFor(t, 20*time.Second, fmt.Sprintf("%v subscriptions", n), func() bool {
			return rn.metric(t, "flechtwerk_mqtt_subscriptions", nil) == n
		})
	}
	total := 0
	expect := func(topic, payload string, forwarded bool) {
		t.Helper()
		pub.Publish(t, topic, []byte(payload))
		if forwarded {
			total++
		}
		// A marker on A (active throughout but for the suspension) proves
		// the bridge handled what was published before it.
	}
	marker := func(i int) {
		t.Helper()
		pub.Publish(t, ta, fmt.Appendf(nil, "marker%d", i))
		total++
		got := waitValues(t, c, out, total)
		require.Equal(t, 1, got[fmt.Sprintf("marker%d", i)])
	}

	expect(ta, "a1", true)
	expect(tb, "b-before-add", false)
	marker(1)

	setConfig(t, c, cfgTopic, "B", tb, false)
	subs(2)
	expect(tb, "b1", true)
	marker(2)

	setConfig(t, c, cfgTopic, "A", ta, true) // suspended
	subs(1)
	expect(ta, "a-suspended", false)
	expect(tb, "b2", true)
	setConfig(t, c, cfgTopic, "A", ta, false) // resumed
	subs(2)
	marker(3)

	setConfig(t, c, cfgTopic, "B", "", false) // removed
	subs(1)
	expect(tb, "b-removed", false)
	marker(4)

	got := values(c.ReadCommitted(t, out))
	for _, p := range []string{"a1", "b1", "b2"} {
		require.Equal(t, 1, got[p], p)
	}
	for _, p := range []string{"b-before-add", "a-suspended", "b-removed"} {
		require.Zero(t, got[p], p)
	}
	require.Equal(t, float64(total), rn.metric(t, "flechtwerk_mqtt_forwarded_total", nil))
	rn.stop(t)
}

// TestStaleHeldBeforeFirstReconciliationDroppedAfter stops a bridge,
// publishes into its persistent session, and restarts it with a hook that
// waits until the replayed messages arrived before the first
// reconciliation: with the config still there they are all forwarded
// (held, not judged, before the configs were known); with the config
// removed they are acknowledged and counted as stale, and a restart gets
// none of them again.
func TestStaleHeldBeforeFirstReconciliationDroppedAfter(t *testing.T) {
	c := kafkatest.New(t)
	broker := mqtttest.Broker(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	topic := kafkatest.Name("s")
	setConfig(t, c, cfgTopic, "S", topic, false)
	rn := start(t, c, broker, app, "s1", cfgTopic, out)
	rn.stop(t)
	pub := mqtttest.NewPublisher(t, broker)

	const n = 5
	var queuedAtLatch int
	// Round 1: the config is still there.
	for i := range n {
		pub.Publish(t, topic, fmt.Appendf(nil, "held%d", i))
	}
	bridge.SetLatchHook(latchAfter(n, &queuedAtLatch))
	rn = start(t, c, broker, app, "s1", cfgTopic, out)
	got := waitValues(t, c, out, n)
	rn.stop(t)
	bridge.SetLatchHook(nil)
	require.Equal(t, n, queuedAtLatch, "the replayed messages arrived before the first reconciliation")
	for i := range n {
		require.Equal(t, 1, got[fmt.Sprintf("held%d", i)])
	}

	// Round 2: the config is removed while the bridge is away.
	for i := range n {
		pub.Publish(t, topic, fmt.Appendf(nil, "stale%d", i))
	}
	setConfig(t, c, cfgTopic, "S", "", false)
	setConfig(t, c, cfgTopic, "other", kafkatest.Name("o"), false)
	queuedAtLatch = 0
	bridge.SetLatchHook(latchAfter(n, &queuedAtLatch))
	rn = start(t, c, broker, app, "s1", cfgTopic, out)
	kafkatest.WaitFor(t, 20*time.Second, "stale drops", func() bool {
		return rn.metric(t, "flechtwerk_mqtt_dropped_total", map[string]string{"reason": "stale"}) == n
	})
	require.Equal(t, float64(n), rn.metric(t, "flechtwerk_mqtt_dropped_total", map[string]string{"filter": bridge.Unmatched}))
	rn.stop(t)
	bridge.SetLatchHook(nil)
	require.Equal(t, n, queuedAtLatch)
	got = values(c.ReadCommitted(t, out))
	for i := range n {
		require.Zero(t, got[fmt.Sprintf("stale%d", i)])
	}

	// Acknowledged: the session does not deliver them again.
	rn = start(t, c, broker, app, "s1", cfgTopic, out)
	time.Sleep(500 * time.Millisecond)
	require.Zero(t, rn.metric(t, "flechtwerk_mqtt_received_total", nil))
	rn.stop(t)
}

// latchAfter returns a latch hook that waits up to 10s until n messages
// are queued and stores how many were.
func latchAfter(n int, queued *int) func(func() int) {
	return func(q func() int) {
		for deadline := time.Now().Add(10 * time.Second); q() < n && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		*queued = q()
	}
}
