package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

var errPoison = errors.New("poison record")

// TestTransformErrorAbortsBatch fails the transform on one record in the
// middle of a batch. Run ends with a *transformer.ProcessError naming topic,
// partition and offset; nothing of the failing batch is visible (not the
// outputs of the records before the poison, not their state writes) and
// the committed offset stays at the end of the batch before. A restart with
// a transform that no longer fails then processes every input exactly once
// with exact counts.
func TestTransformErrorAbortsBatch(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	const keys = 3
	opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(1000)}

	// Batch before: committed by a transform that does not fail.
	first := values(in, 0, "a", 12, keys)
	c.Produce(t, first...)
	rn := start(t, c, echoCounter(out, nil), opts...)
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	requireOffsets(t, c, app, in, map[int32]int64{0: 12})
	outBefore := valuesOf(readStable(t, c, out))
	changelogBefore := valuesOf(readStable(t, c, app+"-changelog"))
	require.Len(t, outBefore, 12)

	// The failing batch: all produced before the runner starts, so one
	// poll (MaxPollRecords 1000) holds it; the poison sits in the middle,
	// with records of its own key and others before and after it.
	second := values(in, 0, "b", 20, keys)
	const poisonAt = 7
	second[poisonAt].Value = []byte("poison")
	c.Produce(t, second...)
	poisonOffset := second[poisonAt].Offset
	require.Equal(t, int64(12+poisonAt), poisonOffset)

	rn = start(t, c, echoCounter(out, func(rec *transformer.Record) error {
		if string(rec.Value) == "poison" {
			return errPoison
		}
		return nil
	}), opts...)
	err := rn.wait(t, 30*time.Second)
	require.Error(t, err)
	var pe *transformer.ProcessError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, in, pe.Topic)
	require.Equal(t, int32(0), pe.Partition)
	require.Equal(t, poisonOffset, pe.Offset)
	require.Equal(t, second[poisonAt].Key, pe.Key)
	require.ErrorIs(t, err, errPoison)
	require.ErrorContains(t, err, fmt.Sprintf("topic %s partition 0 offset %d", in, poisonOffset))

	// Nothing of the failing batch is visible; the offset did not move.
	require.Equal(t, outBefore, valuesOf(readStable(t, c, out)))
	require.Equal(t, changelogBefore, valuesOf(readStable(t, c, app+"-changelog")))
	requireOffsets(t, c, app, in, map[int32]int64{0: 12})

	// The fixed transform replays the failed batch exactly once.
	second[poisonAt].Value = []byte("poison") // an ordinary value now
	rn = start(t, c, echoCounter(out, nil), opts...)
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
	requireOffsets(t, c, app, in, map[int32]int64{0: 32})
}
