package txn

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestLaneSharesOneTransaction: two tasks join a lane's transaction and
// send into it; a third tries to join after the seal and waits; the end
// commits the outputs of both with the offsets of both partitions in one
// transaction; the waiting task then joins the next one. A refused end
// (no group member) aborts everything of it, and the next Join opens a
// new producer, whose transaction commits.
func TestLaneSharesOneTransaction(t *testing.T) {
	c := kafkatest.New(t)
	app := kafkatest.Name("app")
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	c.CreateTopic(t, in, 3)
	c.CreateTopic(t, out, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	td, err := c.Adm.ListTopics(ctx, in)
	require.NoError(t, err)
	member := c.JoinGroup(t, app, in)
	opened := 0
	lane := NewLane(func(ctx context.Context) (*Producer, error) {
		opened++
		return OpenRouted(ctx, app+"-shared-test", time.Minute, Routing{}, kgo.SeedBrokers(c.Brokers...))
	}, app)
	defer lane.Close()
	offsets := func(next map[int32]int64, m func() (string, int32)) *Offsets {
		return &Offsets{Group: app, Next: map[string]map[int32]int64{in: next}, TopicIDs: map[string][16]byte{in: td[in].ID}, Member: m}
	}
	send := func(x *Txn, v string) {
		x.Send(&kgo.Record{Topic: out, Partition: 0, Key: []byte(v), Value: []byte(v)})
	}

	a, err := lane.Join(ctx, "a")
	require.NoError(t, err)
	send(a, "a1")
	b, err := lane.Join(ctx, "b")
	require.NoError(t, err)
	require.Same(t, a, b, "one transaction")
	send(b, "b1")
	require.Equal(t, []any{"a", "b"}, lane.Seal())

	joined := make(chan *Txn, 1)
	go func() {
		x, err := lane.Join(ctx, "c")
		if err != nil {
			panic(err)
		}
		joined <- x
	}()
	select {
	case <-joined:
		t.Fatal("joined a sealed transaction")
	case <-time.After(200 * time.Millisecond):
	}
	_, err = lane.End(ctx, offsets(map[int32]int64{0: 5, 1: 7}, member.Identity))
	require.NoError(t, err)
	x := <-joined
	require.NotSame(t, a, x, "the next transaction")
	send(x, "c1")
	require.Equal(t, []any{"c"}, lane.Seal())
	// Refused: no member. Nothing of it is visible.
	_, err = lane.End(ctx, offsets(map[int32]int64{2: 3}, func() (string, int32) { return "", -1 }))
	require.ErrorIs(t, err, ErrNoMember)

	x, err = lane.Join(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, 2, opened, "a new producer after the failed transaction")
	send(x, "c2")
	lane.Seal()
	_, err = lane.End(ctx, offsets(map[int32]int64{2: 4}, member.Identity))
	require.NoError(t, err)

	c.WaitSettled(t, out)
	var got []string
	for _, r := range c.ReadCommitted(t, out) {
		got = append(got, string(r.Key))
	}
	require.Equal(t, []string{"a1", "b1", "c2"}, got, "each committed output once, in order; c1 aborted")
	require.Equal(t, map[int32]int64{0: 5, 1: 7, 2: 4}, c.CommittedOffsets(t, app, in))
}
