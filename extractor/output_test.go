package extractor_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// sendAll sends one record per item of the config to out with send and
// commits the cursor.
func sendAll(send func(e *extractor.Emitter[cursor], key []byte, i int)) *extractor.Stage[conf, cursor] {
	return extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		if cur.Next >= cfg.Config.Items {
			return nil
		}
		for i := cur.Next; i < cfg.Config.Items; i++ {
			send(e, cfg.Key, i)
		}
		return e.Commit(ctx, cursor{Next: cfg.Config.Items})
	})
}

// TestOutputTimestampAndPartition: an Output sent with SendRecord keeps
// its Timestamp and goes to its ToPartition; one without, and every Send,
// goes to the murmur2 partition of its key.
func TestOutputTimestampAndPartition(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 4)
	const n = 12
	c.Produce(t, configRec(t, cfgTopic, 0, "src", n))
	ts := time.UnixMilli(1_600_000_000_000)
	ex := sendAll(func(e *extractor.Emitter[cursor], key []byte, i int) {
		v := []byte(strconv.Itoa(i))
		k := append(append([]byte{}, key...), v...)
		switch i % 3 {
		case 0:
			e.SendRecord(extractor.Output{Topic: out, Key: k, Value: v, Timestamp: ts.Add(time.Duration(i) * time.Millisecond)}.ToPartition(3))
		case 1:
			e.SendRecord(extractor.Output{Topic: out, Key: k, Value: v, Timestamp: ts.Add(time.Duration(i) * time.Millisecond)})
		default:
			e.Send(out, k, v)
		}
	})
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic), runner.PollInterval(time.Hour))
	kafkatest.WaitFor(t, 60*time.Second, "every record committed", func() bool { return countVisible(t, c, out) == n })
	require.NoError(t, rn.stop(t))
	for _, r := range c.ReadCommitted(t, out) {
		i, err := strconv.Atoi(string(r.Value))
		require.NoError(t, err)
		if i%3 != 2 {
			require.Equal(t, ts.Add(time.Duration(i)*time.Millisecond).UnixMilli(), r.Timestamp.UnixMilli(), "record %d", i)
		}
		want := transformer.Murmur2(r.Key, 4)
		if i%3 == 0 {
			want = 3
		}
		require.Equal(t, want, r.Partition, "record %d", i)
	}
}

// TestOutputPartitionOutOfRange: an Output to a partition its topic does
// not have (or a negative one) ends Run with a coded error naming topic
// and partition; nothing of the page is visible.
func TestOutputPartitionOutOfRange(t *testing.T) {
	for _, p := range []int32{7, -2} {
		t.Run(strconv.Itoa(int(p)), func(t *testing.T) {
			c := kafkatest.New(t)
			cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, cfgTopic, 1)
			c.CreateTopic(t, out, 2)
			c.Produce(t, configRec(t, cfgTopic, 0, "src", 3))
			ex := sendAll(func(e *extractor.Emitter[cursor], key []byte, i int) {
				e.Send(out, key, []byte("fine alone"))
				e.SendRecord(extractor.Output{Topic: out, Key: key, Value: []byte("x")}.ToPartition(p))
			})
			rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic), runner.PollInterval(time.Hour))
			err := rn.wait(t, 60*time.Second)
			require.ErrorIs(t, err, flechtwerk.ErrOutputPartition)
			oe, ok := errors.AsType[*flechtwerk.OutputError](err)
			require.True(t, ok, "%v", err)
			require.Equal(t, out, oe.Topic)
			require.Equal(t, p, oe.Partition)
			c.WaitSettled(t, out)
			require.Empty(t, c.ReadCommitted(t, out))
		})
	}
}

// TestOutputToCursorChangelog: a record a poll sends to the stage's cursor
// changelog fails the poll with DUPLICATE_TOPIC; the changelog holds no
// such record, so no restore can load a forged cursor.
func TestOutputToCursorChangelog(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "src", 3))
	cl := changelog.Topic(app)
	ex := sendAll(func(e *extractor.Emitter[cursor], key []byte, i int) {
		e.Send(out, key, []byte("fine alone"))
		e.SendRecord(extractor.Output{Topic: cl, Key: key, Value: []byte("garbage")}.ToPartition(0))
	})
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic), runner.PollInterval(time.Hour))
	err := rn.wait(t, 60*time.Second)
	require.ErrorIs(t, err, flechtwerk.ErrDuplicateTopic)
	require.ErrorContains(t, err, cl)
	c.WaitSettled(t, out)
	require.Empty(t, c.ReadCommitted(t, out))
	for _, r := range c.ReadCommitted(t, cl) {
		require.NotEqual(t, "garbage", string(r.Value), "a poll's record reached the changelog")
	}
}
