package group

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// member simulates one client's side of the protocol: its balancer, what
// it owns and its generation.
type member struct {
	id    string
	b     *Balancer
	owned map[string][]int32
	gen   int32
}

var topicsAB = []string{"a", "b"}

// rebalance runs one join/sync round over ms as kgo does (the first
// member leads) and returns each member's new assignment.
func rebalance(t *testing.T, ms []*member, partitions int32) map[string]map[string][]int32 {
	t.Helper()
	var joins []kmsg.JoinGroupResponseMember
	for _, m := range ms {
		joins = append(joins, kmsg.JoinGroupResponseMember{MemberID: m.id, ProtocolMetadata: m.b.JoinGroupMetadata(topicsAB, m.owned, m.gen)})
	}
	mb, topics, err := ms[0].b.MemberBalancer(joins)
	require.NoError(t, err)
	require.Len(t, topics, 2)
	counts := map[string]int32{}
	for topic := range topics {
		counts[topic] = partitions
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(counts)
	require.NoError(t, err)
	out := map[string]map[string][]int32{}
	for _, s := range into.IntoSyncAssignment() {
		for _, m := range ms {
			if m.id == s.MemberID {
				a, err := m.b.ParseSyncAssignment(s.MemberAssignment)
				require.NoError(t, err)
				out[m.id] = a
			}
		}
	}
	return out
}

// tasksOf returns the tasks an assignment gives, requiring that each comes
// for every topic.
func tasksOf(t *testing.T, a map[string][]int32) []int32 {
	t.Helper()
	held := Held(a)
	var out []int32
	for n, k := range held {
		require.Equal(t, len(topicsAB), k, "task %d assigned for %d of %d topics", n, k, len(topicsAB))
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestBalancerCooperativeJoin runs the two rounds of a join with kgo's
// cooperative protocol: in the first, the three owners each lose one task
// and the new member gets nothing (what moves must be revoked first); in
// the second, the new member gets the three. No task is ever assigned to
// two members, and no task that stays is ever revoked.
func TestBalancerCooperativeJoin(t *testing.T) {
	var ms []*member
	for _, id := range []string{"m1", "m2", "m3"} {
		ms = append(ms, &member{id: id, b: NewBalancer(BalancerConfig{})})
	}
	first := rebalance(t, ms, 12)
	for _, m := range ms {
		m.owned, m.gen = first[m.id], 1
		require.Len(t, tasksOf(t, m.owned), 4)
	}
	before := map[string][]int32{}
	for _, m := range ms {
		before[m.id] = tasksOf(t, m.owned)
	}

	ms = append(ms, &member{id: "m4", b: NewBalancer(BalancerConfig{})})
	round1 := rebalance(t, ms, 12)
	require.Empty(t, tasksOf(t, round1["m4"]), "round 1: nothing for the new member yet")
	for _, m := range ms[:3] {
		now := tasksOf(t, round1[m.id])
		require.Len(t, now, 3, "round 1: %s keeps three", m.id)
		require.Subset(t, before[m.id], now)
		m.owned, m.gen = round1[m.id], 2
	}
	round2 := rebalance(t, ms, 12)
	all := map[int32]string{}
	for _, m := range ms {
		now := tasksOf(t, round2[m.id])
		require.Len(t, now, 3)
		for _, n := range now {
			require.Empty(t, all[n], "task %d twice", n)
			all[n] = m.id
		}
		if m.id != "m4" {
			require.Equal(t, tasksOf(t, m.owned), now, "round 2 changes nothing for %s", m.id)
		}
	}
	require.Len(t, all, 12)
}

// TestBalancerLeave: when a member leaves, the others keep their tasks
// and get its tasks in one round (nothing is revoked).
func TestBalancerLeave(t *testing.T) {
	var ms []*member
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		ms = append(ms, &member{id: id, b: NewBalancer(BalancerConfig{})})
	}
	first := rebalance(t, ms, 12)
	for _, m := range ms {
		m.owned, m.gen = first[m.id], 1
	}
	ms = ms[1:]
	next := rebalance(t, ms, 12)
	for _, m := range ms {
		now := tasksOf(t, next[m.id])
		require.Len(t, now, 4)
		require.Subset(t, now, tasksOf(t, m.owned))
	}
}

// TestBalancerStandbysAndOffsets: the offsets a member sends reach the
// leader's balance (a moving task goes where its store is), and the
// standby tasks reach each member (Standbys and OnStandbys).
func TestBalancerStandbysAndOffsets(t *testing.T) {
	got := map[string][]int32{}
	mk := func(id string, offs map[int32]int64) *member {
		return &member{id: id, b: NewBalancer(BalancerConfig{
			Standbys:   1,
			Offsets:    func() map[int32]int64 { return offs },
			OnStandbys: func(s []int32) { got[id] = s },
		})}
	}
	// m3 left holding 4 and 5; m2 holds a store of 5 close to the end.
	ms := []*member{
		mk("m1", map[int32]int64{5: 10}),
		mk("m2", map[int32]int64{5: 500}),
	}
	ms[0].owned, ms[0].gen = map[string][]int32{"a": {0, 1}, "b": {0, 1}}, 3
	ms[1].owned, ms[1].gen = map[string][]int32{"a": {2, 3}, "b": {2, 3}}, 3
	a := rebalance(t, ms, 6)
	require.Contains(t, tasksOf(t, a["m2"]), int32(5), "task 5 goes to the member with the closest store")
	for _, m := range ms {
		s := m.b.Standbys()
		require.Len(t, s, 3, "standbys of %s", m.id)
		require.Equal(t, s, got[m.id])
		for _, n := range s {
			require.NotContains(t, tasksOf(t, a[m.id]), n, "%s owner and standby of %d", m.id, n)
		}
	}
}

// TestBalancerBadUserData: a member whose userdata cannot be decoded is
// balanced as one without local stores; an assignment with bad userdata
// has no standbys. Neither fails.
func TestBalancerBadUserData(t *testing.T) {
	b := NewBalancer(BalancerConfig{Standbys: 1})
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = topicsAB
	meta.UserData = []byte{0xff, 0xff, 0, 0, 0, 9, 1}
	good := b.JoinGroupMetadata(topicsAB, nil, -1)
	mb, _, err := b.MemberBalancer([]kmsg.JoinGroupResponseMember{
		{MemberID: "bad", ProtocolMetadata: meta.AppendTo(nil)},
		{MemberID: "good", ProtocolMetadata: good},
	})
	require.NoError(t, err)
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"a": 4, "b": 4})
	require.NoError(t, err)
	require.Len(t, into.IntoSyncAssignment(), 2)

	var asn kmsg.ConsumerMemberAssignment
	asn.UserData = []byte{0, 1, 0x7f, 0xff, 0xff, 0xff}
	t1 := kmsg.NewConsumerMemberAssignmentTopic()
	t1.Topic, t1.Partitions = "a", []int32{1}
	asn.Topics = append(asn.Topics, t1)
	m, err := b.ParseSyncAssignment(asn.AppendTo(nil))
	require.NoError(t, err)
	require.Equal(t, map[string][]int32{"a": {1}}, m)
	require.Empty(t, b.Standbys())
}

func TestUserDataRoundTrip(t *testing.T) {
	for _, offs := range []map[int32]int64{nil, {}, {0: 0, 7: 1 << 40, 3: -1}} {
		d, err := decodeMemberData(memberData{Offsets: offs}.encode())
		require.NoError(t, err)
		require.Len(t, d.Offsets, len(offs))
		for k, v := range offs {
			require.Equal(t, v, d.Offsets[k])
		}
	}
	for _, s := range [][]int32{nil, {0}, {1, 5, 9}} {
		d, err := decodeAssignmentData(assignmentData{Standbys: s}.encode())
		require.NoError(t, err)
		require.Equal(t, len(s), len(d.Standbys))
	}
	// A later version with more fields: the v1 fields are read.
	b := memberData{Offsets: map[int32]int64{2: 9}}.encode()
	b[1] = 2
	d, err := decodeMemberData(append(b, 1, 2, 3))
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{2: 9}, d.Offsets)
	for _, bad := range [][]byte{nil, {0}, {0, 0, 0, 0, 0, 0}, {0, 1, 0xff, 0xff, 0xff, 0xff}, {0, 1, 0, 0, 0, 2, 0, 0}} {
		_, err := decodeMemberData(bad)
		require.Error(t, err, fmt.Sprintf("%x", bad))
		_, err = decodeAssignmentData(bad)
		require.Error(t, err, fmt.Sprintf("%x", bad))
	}
}

// FuzzDecodeUserData: decoding any bytes as either userdata never panics,
// and whatever decodes re-encodes to bytes that decode to the same.
func FuzzDecodeUserData(f *testing.F) {
	f.Add(memberData{Offsets: map[int32]int64{0: 5, 3: 99}}.encode())
	f.Add(assignmentData{Standbys: []int32{1, 2}}.encode())
	f.Add([]byte{0, 1, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := decodeMemberData(b); err == nil {
			again, err := decodeMemberData(d.encode())
			require.NoError(t, err)
			require.Equal(t, d, again)
		}
		if d, err := decodeAssignmentData(b); err == nil {
			again, err := decodeAssignmentData(d.encode())
			require.NoError(t, err)
			require.Equal(t, d, again)
		}
		// Through the balancer: a member's metadata with these bytes as
		// its userdata balances without error.
		meta := kmsg.NewConsumerMemberMetadata()
		meta.Version = 3
		meta.Topics = []string{"a"}
		meta.UserData = b
		bal := NewBalancer(BalancerConfig{Standbys: 1})
		mb, _, err := bal.MemberBalancer([]kmsg.JoinGroupResponseMember{{MemberID: "x", ProtocolMetadata: meta.AppendTo(nil)}})
		require.NoError(t, err)
		_, err = mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"a": 3})
		require.NoError(t, err)
		var asn kmsg.ConsumerMemberAssignment
		asn.UserData = b
		_, err = bal.ParseSyncAssignment(asn.AppendTo(nil))
		require.NoError(t, err)
	})
}
