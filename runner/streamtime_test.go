package runner

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestStoreStageStreamTime: a stage with a named store and no timers or
// TTL sees the task's stream time, not its chunk's: a record at 50 after
// one at 100 (another batch) sees 100, and so does one at 60 after a
// restart (stream time is persisted with the timer store).
func TestStoreStageStreamTime(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("stream")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	opts := []TransformerOpt{SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in), StateDir(t.TempDir()),
		SessionTimeout(3 * time.Second), CommitInterval(50 * time.Millisecond), WithLogger(testLogger()),
		WithConsumerOpts(kgo.HeartbeatInterval(200 * time.Millisecond))}
	seen := transformer.NewStore[int]("seen", nil)
	stage := func() Stage {
		return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
			e.SetState(n + 1)
			if err := seen.Put(e, rec.Key, n+1); err != nil {
				return err
			}
			e.Send(out, rec.Key, strconv.AppendInt(nil, e.StreamTime().UnixMilli(), 10))
			return nil
		}, transformer.Stores(seen))
	}
	produced := 0
	produce := func(ts int64) {
		c.Produce(t, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("v"), Timestamp: time.UnixMilli(ts)})
		produced++
		kafkatest.WaitFor(t, 60*time.Second, "input committed", func() bool {
			return c.CommittedOffsets(t, app, in)[0] == int64(produced)
		})
	}
	inst := startInstance(t, stage(), opts...)
	produce(100)
	produce(50)
	require.NoError(t, inst.stop(t))
	inst = startInstance(t, stage(), opts...)
	produce(60)
	require.NoError(t, inst.stop(t))

	c.WaitSettled(t, out)
	var got []string
	for _, r := range c.ReadCommitted(t, out) {
		got = append(got, string(r.Value))
	}
	require.Equal(t, []string{"100", "100", "100"}, got)
}
