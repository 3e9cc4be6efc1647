package kafkatest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKfakeKeepsMemberKilledInJoin reproduces the kfake defect Evict works
// around, and shows Evict removes the member. A member whose connection
// closes while its JoinGroup waits for the rebalance is still counted as
// joined. kfake answers it into the dead connection and starts its session
// timer only if that answer was taken, which it is about half the time;
// otherwise the group stays Stable with the dead member past its session
// timeout until another rebalance, and the partitions assigned to it are
// not consumed. Apache Kafka starts the session timer when the join
// completes, delivered or not.
func TestKfakeKeepsMemberKilledInJoin(t *testing.T) {
	c, _ := Fake(t)
	group := Name("dead-joiner")
	const session = 2 * time.Second
	ctx := context.Background()
	client := func(id string) *kgo.Client {
		// No retries: the dead member's JoinGroup must not be sent again.
		cl, err := kgo.NewClient(c.clientOpts(kgo.ClientID(id), kgo.RequestRetries(0))...)
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	join := func(cl *kgo.Client, member string) (*kmsg.JoinGroupResponse, error) {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = int32(session.Milliseconds()), 30_000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = "range"
		p.Metadata = (&kmsg.ConsumerMemberMetadata{Topics: []string{"t"}}).AppendTo(nil)
		req.Protocols = append(req.Protocols, p)
		return req.RequestWith(ctx, cl)
	}
	// joined joins (v4+: first for a member ID) and syncs.
	joined := func(cl *kgo.Client, member string) (string, int32) {
		if member == "" {
			r, err := join(cl, "")
			require.NoError(t, err)
			member = r.MemberID
		}
		r, err := join(cl, member)
		require.NoError(t, err)
		require.NoError(t, kerr.ErrorForCode(r.ErrorCode))
		s := kmsg.NewPtrSyncGroupRequest()
		s.Group, s.MemberID, s.Generation = group, member, r.Generation
		_, err = s.RequestWith(ctx, cl)
		require.NoError(t, err)
		return member, r.Generation
	}
	members := func() []string {
		gs, err := c.Adm.DescribeGroups(ctx, group)
		require.NoError(t, err)
		var ids []string
		for _, m := range gs[group].Members {
			ids = append(ids, m.MemberID)
		}
		return ids
	}

	live := client("live")
	liveID, _ := joined(live, "")
	// kept kills a member in its JoinGroup (which waits for the live one
	// to rejoin) and reports whether it is still in the group, Stable, well
	// past its session timeout. kfake answers the dead member's join into
	// its closed connection: when its select picks the connection's buffer
	// over its closed state, the session timer starts and the member
	// expires (a rebalance the live member sees in its heartbeat).
	kept := func() (string, bool) {
		dead := client("dead")
		r, err := join(dead, "")
		require.NoError(t, err)
		deadID := r.MemberID
		go func() { _, _ = join(dead, deadID) }()
		WaitFor(t, 10*time.Second, "the dead member joined", func() bool { return slices.Contains(members(), deadID) })
		dead.Close()
		time.Sleep(300 * time.Millisecond)
		_, gen := joined(live, liveID)
		for range 12 {
			time.Sleep(session / 4)
			hb := kmsg.NewPtrHeartbeatRequest()
			hb.Group, hb.MemberID, hb.Generation = group, liveID, gen
			resp, err := hb.RequestWith(ctx, live)
			require.NoError(t, err)
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				require.ErrorIs(t, err, kerr.RebalanceInProgress)
				joined(live, liveID)
				require.NotContains(t, members(), deadID)
				return deadID, false
			}
		}
		gs, err := c.Adm.DescribeGroups(ctx, group)
		require.NoError(t, err)
		require.Equal(t, "Stable", gs[group].State)
		return deadID, slices.Contains(members(), deadID)
	}
	var deadID string
	for i := 0; ; i++ {
		require.Less(t, i, 20, "kfake expired every member killed in its JoinGroup: Evict may no longer be needed")
		id, ok := kept()
		if ok {
			deadID = id
			break
		}
	}
	require.ElementsMatch(t, []string{liveID, deadID}, members())

	removed, err := c.Evict(ctx, group, "dead")
	require.NoError(t, err)
	require.Equal(t, []string{deadID}, removed)
	require.NotContains(t, members(), deadID)
}
