package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestLagZeroBehindTransactionalInput feeds the runner input written in
// transactions (as any upstream exactly-once application writes it,
// including an aborted one): the committed offsets must pass the
// transaction markers and reach the end offsets, and every committed input
// has exactly one output while the aborted ones have none.
func TestLagZeroBehindTransactionalInput(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)

	up := txnClient(t, c, kafkatest.Name("upstream"))
	var committed []*kgo.Record
	for i := range 3 {
		var recs []*kgo.Record
		for p := range int32(2) {
			recs = append(recs, &kgo.Record{Topic: in, Partition: p, Key: []byte(fmt.Sprintf("k%d", p)), Value: []byte(fmt.Sprintf("c%d-%d", i, p))})
		}
		inTxn(t, up, kgo.TryCommit, recs...)
		committed = append(committed, recs...)
	}
	inTxn(t, up, kgo.TryAbort, &kgo.Record{Topic: in, Partition: 0, Key: []byte("k0"), Value: []byte("aborted")})
	// Markers land after EndTxn returns on Kafka: wait for the last one.
	kafkatest.WaitFor(t, 20*time.Second, "upstream markers", func() bool {
		return lastStable(t, c, in, 0) == c.EndOffsets(t, in)[0]
	})

	echo := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		o.Send(out, rec.Key, rec.Value)
		return nil
	})
	rn := start(t, c, echo, runner.ApplicationID(app), runner.InputTopics(in))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	got := map[string]int{}
	for _, r := range readStable(t, c, out) {
		got[string(r.Value)]++
	}
	require.Len(t, got, len(committed))
	for _, r := range committed {
		require.Equal(t, 1, got[string(r.Value)], "output of %s", r.Value)
	}
	require.Zero(t, got["aborted"])
}

// TestInputPartitionsGrow adds partitions to the input topic of a running
// stateful application: the changelog cannot follow without a migration,
// so Run must end with ErrPartitionMismatch instead of stalling.
func TestInputPartitionsGrow(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	c.Produce(t, inputs(in, 20, 4, 2)...)
	rn := start(t, c, counter(out), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.WithConsumerOpts(kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(time.Second)))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Adm.CreatePartitions(ctx, 2, in)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	err = rn.wait(t, 90*time.Second)
	require.ErrorIs(t, err, flechtwerk.ErrPartitionMismatch)
	require.ErrorContains(t, err, "partition")
}

// TestChangelogMustBeCompactOnly rejects an existing changelog whose
// cleanup policy also deletes: state older than retention would vanish.
func TestChangelogMustBeCompactOnly(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Adm.CreateTopic(ctx, 2, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact,delete")}, app+"-changelog")
	require.NoError(t, err)
	c.Produce(t, inputs(in, 4, 2, 2)...)

	rn := start(t, c, counter(out), runner.ApplicationID(app), runner.InputTopics(in), runner.StateDir(t.TempDir()))
	err = rn.wait(t, 60*time.Second)
	require.True(t, errors.Is(err, flechtwerk.ErrChangelogMismatch), "got %v", err)
	require.ErrorContains(t, err, "cleanup.policy")
	require.Empty(t, c.CommittedOffsets(t, app, in), "nothing processed")
}
