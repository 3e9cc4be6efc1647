package mqttbridge_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/mqtttest"
	"github.com/flechtwerk/flechtwerk/mqttbridge"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestOutputTimestampAndPartition: a relay's Output keeps its Timestamp
// and goes to its ToPartition; one without goes to the murmur2 partition
// of its key.
func TestOutputTimestampAndPartition(t *testing.T) {
	c := kafkatest.New(t)
	broker := mqtttest.Broker(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 4)
	base := kafkatest.Name("dev")
	setConfig(t, c, cfgTopic, "devices", base+"/+/temp", false)
	ts := time.UnixMilli(1_600_000_000_000)
	relay := func(_ mqttbridge.Config[conf], m mqttbridge.Message) (*mqttbridge.Output, error) {
		i, err := strconv.Atoi(string(m.Payload))
		if err != nil {
			return nil, err
		}
		o := mqttbridge.Output{Topic: out, Key: []byte(m.Topic), Value: m.Payload, Timestamp: ts.Add(time.Duration(i) * time.Millisecond)}
		if i%2 == 0 {
			o = o.ToPartition(3)
		}
		return &o, nil
	}
	rn := startRelay(t, c, broker, app, "bridge-1", cfgTopic, relay)
	pub := mqtttest.NewPublisher(t, broker)
	const n = 20
	for i := range n {
		pub.Publish(t, fmt.Sprintf("%s/d%d/temp", base, i%5), strconv.AppendInt(nil, int64(i), 10))
	}
	got := waitValues(t, c, out, n)
	require.Len(t, got, n)
	for _, r := range c.ReadCommitted(t, out) {
		i, err := strconv.Atoi(string(r.Value))
		require.NoError(t, err)
		require.Equal(t, ts.Add(time.Duration(i)*time.Millisecond).UnixMilli(), r.Timestamp.UnixMilli(), "message %d", i)
		want := int32(3)
		if i%2 == 1 {
			want = transformer.Murmur2(r.Key, 4)
		}
		require.Equal(t, want, r.Partition, "message %d", i)
	}
	rn.stop(t)
}

// TestOutputPartitionOutOfRange: a relay's Output to a partition its topic
// does not have ends Run with a coded error naming topic and partition;
// nothing of the batch is visible.
func TestOutputPartitionOutOfRange(t *testing.T) {
	for _, p := range []int32{7, -2} {
		t.Run(strconv.Itoa(int(p)), func(t *testing.T) {
			c := kafkatest.New(t)
			broker := mqtttest.Broker(t)
			cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, cfgTopic, 1)
			c.CreateTopic(t, out, 2)
			base := kafkatest.Name("dev")
			setConfig(t, c, cfgTopic, "devices", base+"/+/temp", false)
			relay := func(_ mqttbridge.Config[conf], m mqttbridge.Message) (*mqttbridge.Output, error) {
				o := mqttbridge.Output{Topic: out, Key: []byte(m.Topic), Value: m.Payload}.ToPartition(p)
				return &o, nil
			}
			rn := startRelay(t, c, broker, app, "bridge-1", cfgTopic, relay)
			pub := mqtttest.NewPublisher(t, broker)
			pub.Publish(t, base+"/d1/temp", []byte("1"))
			select {
			case <-rn.done:
			case <-time.After(60 * time.Second):
				t.Fatal("Run did not end")
			}
			require.ErrorIs(t, rn.err, flechtwerk.ErrOutputPartition)
			oe, ok := errors.AsType[*flechtwerk.OutputError](rn.err)
			require.True(t, ok, "%v", rn.err)
			require.Equal(t, out, oe.Topic)
			require.Equal(t, p, oe.Partition)
			require.Empty(t, c.ReadCommitted(t, out))
		})
	}
}
