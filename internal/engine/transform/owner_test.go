package transform

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestCommitsOnlyUnderTheOwningMember: a task commits only while the
// group member has the ID the task was assigned under. kgo can rejoin as
// a new member without calling OnPartitionsLost (an offset commit
// answered UNKNOWN_MEMBER_ID makes it join again, and the coordinator
// gives it a new ID); the new member's generation is valid, so a commit
// for a task another member may own by now would be accepted. Both
// commit paths refuse it: the direct commit of an interval that wrote
// nothing is not sent, and a transaction's offsets get no member (the
// transaction aborts). Under the current ID both commit.
func TestCommitsOnlyUnderTheOwningMember(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("owner-in"), kafkatest.Name("owner-out"), kafkatest.Name("owner")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, &kgo.Record{Topic: in, Partition: 0, Key: []byte("k"), Value: []byte("v")})
	s := start(t, c.Brokers, app, in, t.TempDir(), echoCount(out))
	kafkatest.WaitFor(t, 60*time.Second, "offset 1 committed", func() bool {
		return c.CommittedOffsets(t, app, in)[0] == 1
	})
	q := s.ops.query()
	require.NotNil(t, q)
	rn := q.rn
	member, gen := rn.consumer.GroupMetadata()
	require.NotEmpty(t, member)

	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	rewind := map[string]map[int32]kgo.EpochOffset{in: {0: {Epoch: -1, Offset: 0}}}
	err := rn.commitDirect(cctx, rewind, "an-earlier-member-id")
	require.ErrorIs(t, err, kerr.UnknownMemberID)
	require.Equal(t, map[int32]int64{0: 1}, c.CommittedOffsets(t, app, in), "the refused commit was not sent")

	id, g := rn.taskConfig(0, "an-earlier-member-id").Member()
	require.Equal(t, "", id)
	require.Equal(t, int32(-1), g)
	id, g = rn.taskConfig(0, member).Member()
	require.Equal(t, member, id)
	require.GreaterOrEqual(t, g, gen)

	require.NoError(t, rn.commitDirect(cctx, map[string]map[int32]kgo.EpochOffset{in: {0: {Epoch: -1, Offset: 1}}}, member))
}
