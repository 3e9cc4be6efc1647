package chaos

import (
	"context"
	bin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestKfakeDeadLeaderStallsGroupUnlessEvicted reproduces the stall of
// kfake's classic group coordinator that the harness works around, and
// shows that evicting the dead member (what the harness does on kfake after
// a kill) avoids it. The leader dies inside its JoinGroup; kfake still
// counts it as joined, completes the rebalance with it and answers it (into
// the dead connection's buffer), so the others wait in SyncGroup for a
// leader that never syncs. Their session timers run meanwhile: one that
// fires before the dead leader's removes its member with its SyncGroup
// pending, unanswered, and decrements the group's count of joined members,
// which completeRebalance had reset to 0 (kfake groups.go, removeMember).
// From then on a rebalance never completes by everyone joining, only when
// its rebalance timeout passes without another join or leave: the group's
// only member waits in JoinGroup until its session times out and its
// JoinGroup times out unanswered. Apache Kafka keeps a member awaiting its
// SyncGroup alive and counts joins afresh every rebalance.
func TestKfakeDeadLeaderStallsGroupUnlessEvicted(t *testing.T) {
	t.Run("left to its session timeout", func(t *testing.T) { testDeadLeader(t, false) })
	t.Run("evicted", func(t *testing.T) { testDeadLeader(t, true) })
}

func testDeadLeader(t *testing.T, evictDead bool) {
	c, _ := kafkatest.Fake(t)
	const (
		partitions = 4
		// The session timeouts order the timers, all started when the
		// rebalance completes: the waiting member's fires first, then
		// the dead leader's, then the live client's.
		waiterSession = 1500 * time.Millisecond
		leaderSession = 5 * time.Second
		liveSession   = 10 * time.Second
	)
	topic, group := kafkatest.Name("kfake-lead-in"), kafkatest.Name("kfake-lead-app")
	c.CreateTopic(t, topic, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var (
		mu       sync.Mutex
		timeouts []string // live clients whose JoinGroup timed out unanswered
	)
	live := func(clientID string) {
		t.Helper()
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(c.Brokers...),
			kgo.ClientID(clientID),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.Balancers(kgo.RangeBalancer()),
			kgo.SessionTimeout(liveSession),
			kgo.HeartbeatInterval(200*time.Millisecond),
			// JoinGroup's read timeout: the rebalance timeout plus
			// the overhead.
			kgo.RebalanceTimeout(12*time.Second),
			kgo.RequestTimeoutOverhead(time.Second),
			kgo.WithHooks(joinTimeouts(func() {
				mu.Lock()
				defer mu.Unlock()
				timeouts = append(timeouts, clientID)
			})),
		)
		require.NoError(t, err)
		t.Cleanup(cl.Close)
	}
	timedOut := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), timeouts...)
	}
	view := func() (state string, clients []string, assigned int) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		gs, err := c.Adm.DescribeGroups(rctx, group)
		if err != nil || gs[group].Err != nil {
			return "", nil, 0
		}
		for _, m := range gs[group].Members {
			clients = append(clients, m.ClientID)
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, tp := range a.Topics {
					assigned += len(tp.Partitions)
				}
			}
		}
		slices.Sort(clients)
		return gs[group].State, clients, assigned
	}
	settled := func(want ...string) func() bool {
		return func() bool {
			state, clients, assigned := view()
			return state == "Stable" && slices.Equal(clients, want) && assigned == partitions
		}
	}
	members := func(want ...string) func() bool {
		return func() bool {
			_, clients, _ := view()
			return slices.Equal(clients, want)
		}
	}

	// The leader-to-be: alone in the group, stable.
	leader := dialRaw(t, c.Brokers[0], "leader")
	lj := rawJoin(group, topic, leaderSession)
	leaderID := leader.joinNew(t, lj)
	lj.MemberID = leaderID
	var lresp kmsg.JoinGroupResponse
	require.NoError(t, leader.roundTrip(lj, &lresp, 10*time.Second))
	require.Zero(t, lresp.ErrorCode)
	require.Equal(t, leaderID, lresp.LeaderID)
	ls := rawSync(group, leaderID, lresp.Generation)
	var lsresp kmsg.SyncGroupResponse
	require.NoError(t, leader.roundTrip(ls, &lsresp, 10*time.Second))
	require.Zero(t, lsresp.ErrorCode)

	// A live client and a second member join; the rebalance waits for
	// the leader.
	live("live")
	kafkatest.WaitFor(t, 30*time.Second, "the live client joining", members("leader", "live"))
	waiter := dialRaw(t, c.Brokers[0], "waiter")
	wj := rawJoin(group, topic, waiterSession)
	wj.MemberID = waiter.joinNew(t, wj)
	require.NoError(t, waiter.send(wj))
	kafkatest.WaitFor(t, 30*time.Second, "the waiting member joining", members("leader", "live", "waiter"))

	// The leader rejoins and dies inside its JoinGroup.
	require.NoError(t, leader.send(lj))
	leader.close()

	// The rebalance completes with the dead leader: the waiting member
	// is answered and waits in SyncGroup, like the live client.
	var wresp kmsg.JoinGroupResponse
	require.NoError(t, waiter.recv(&wresp, 10*time.Second))
	require.Zero(t, wresp.ErrorCode)
	require.Equal(t, leaderID, wresp.LeaderID, "the dead member leads the new generation")
	require.NoError(t, waiter.send(rawSync(group, wj.MemberID, wresp.Generation)))

	if !evictDead {
		// The waiting member's session times out first: it is removed
		// with its SyncGroup unanswered.
		kafkatest.WaitFor(t, 30*time.Second, "the waiting member's session timing out", members("leader", "live"))
		var wsync kmsg.SyncGroupResponse
		err := waiter.recv(&wsync, time.Second)
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout(), "SyncGroup of the member removed while waiting for the dead leader: want no answer, got %+v, %v", wsync, err)
		// Then the dead leader's: the live client is the only member
		// and waits in JoinGroup, and the rebalance does not complete.
		kafkatest.WaitFor(t, 30*time.Second, "the live client the only member", members("live"))
		// Its session (10s) outlasts these 2s.
		for range 20 {
			state, clients, _ := view()
			require.Equal(t, []string{"live"}, clients)
			require.Equal(t, "PreparingRebalance", state, "kfake completed the rebalance of its only member: it may no longer need evict in the harness")
			time.Sleep(100 * time.Millisecond)
		}
		// It is dropped when its session times out, and its JoinGroup
		// times out unanswered (the CI symptom: i/o timeout on JoinGroup).
		kafkatest.WaitFor(t, 60*time.Second, "the live client's JoinGroup timing out unanswered", func() bool {
			return len(timedOut()) > 0
		})
		return
	}

	// The harness's remedy: evict the dead member. The rebalance restarts
	// at once: the waiting member's SyncGroup is answered.
	removed, err := c.Evict(ctx, group, "leader")
	require.NoError(t, err)
	require.Equal(t, []string{leaderID}, removed)
	var wsync kmsg.SyncGroupResponse
	require.NoError(t, waiter.recv(&wsync, 10*time.Second))
	require.ErrorIs(t, kerr.ErrorForCode(wsync.ErrorCode), kerr.RebalanceInProgress)
	waiter.close() // does not rejoin: its session times out
	kafkatest.WaitFor(t, 60*time.Second, "group stable with the live client", settled("live"))
	// Later rebalances complete when everyone joined.
	live("later")
	kafkatest.WaitFor(t, 60*time.Second, "group stable with two live clients", settled("later", "live"))
	require.Empty(t, timedOut(), "JoinGroups that timed out unanswered")
}

// rawJoin is a JoinGroup v5 (MEMBER_ID_REQUIRED first, not flexible) of a
// range consumer of topic.
func rawJoin(group, topic string, session time.Duration) *kmsg.JoinGroupRequest {
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 5
	join.Group = group
	join.SessionTimeoutMillis = int32(session / time.Millisecond)
	join.RebalanceTimeoutMillis = 60000
	join.ProtocolType = "consumer"
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name = "range"
	proto.Metadata = meta.AppendTo(nil)
	join.Protocols = []kmsg.JoinGroupRequestProtocol{proto}
	return join
}

// rawSync is a SyncGroup v3 (not flexible) with no assignments.
func rawSync(group, memberID string, generation int32) *kmsg.SyncGroupRequest {
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version = 3
	sync.Group = group
	sync.MemberID = memberID
	sync.Generation = generation
	return sync
}

// joinTimeouts is a kgo hook that calls fn for every JoinGroup whose
// response did not arrive (a read error: the broker never answered it
// before the request timeout).
type joinTimeouts func()

func (f joinTimeouts) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	var ne net.Error
	if key == int16(kmsg.JoinGroup) && errors.As(e.ReadErr, &ne) && ne.Timeout() {
		f()
	}
}

// rawConn is a bare Kafka connection to one broker, one request at a time;
// closing it drops what it awaits, as the death of its process does.
type rawConn struct {
	t       testing.TB
	conn    net.Conn
	f       *kmsg.RequestFormatter
	corr    int32
	version int16 // of the last request sent
}

func dialRaw(t testing.TB, addr, clientID string) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	require.NoError(t, err)
	r := &rawConn{t: t, conn: conn, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID))}
	t.Cleanup(r.close)
	return r
}

func (r *rawConn) send(req kmsg.Request) error {
	r.corr++
	r.version = req.GetVersion()
	_, err := r.conn.Write(r.f.AppendRequest(nil, req, r.corr))
	return err
}

// roundTrip sends req and reads its response into resp.
func (r *rawConn) roundTrip(req kmsg.Request, resp kmsg.Response, limit time.Duration) error {
	if err := r.send(req); err != nil {
		return err
	}
	return r.recv(resp, limit)
}

// recv reads the response to the last request sent into resp (a
// non-flexible version, that of the request).
func (r *rawConn) recv(resp kmsg.Response, limit time.Duration) error {
	resp.SetVersion(r.version)
	if resp.IsFlexible() {
		return errors.New("rawConn reads non-flexible responses only")
	}
	if err := r.conn.SetReadDeadline(time.Now().Add(limit)); err != nil {
		return err
	}
	var size [4]byte
	if _, err := io.ReadFull(r.conn, size[:]); err != nil {
		return err
	}
	body := make([]byte, bin.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r.conn, body); err != nil {
		return err
	}
	if len(body) < 4 || int32(bin.BigEndian.Uint32(body)) != r.corr {
		return fmt.Errorf("response of %d bytes does not answer correlation id %d", len(body), r.corr)
	}
	return resp.ReadFrom(body[4:])
}

// joinNew sends join without a member ID and returns the member ID that
// MEMBER_ID_REQUIRED hands out.
func (r *rawConn) joinNew(t testing.TB, join *kmsg.JoinGroupRequest) string {
	t.Helper()
	join.MemberID = ""
	var resp kmsg.JoinGroupResponse
	require.NoError(t, r.roundTrip(join, &resp, 10*time.Second))
	require.ErrorIs(t, kerr.ErrorForCode(resp.ErrorCode), kerr.MemberIDRequired)
	require.NotEmpty(t, resp.MemberID)
	return resp.MemberID
}

func (r *rawConn) close() { _ = r.conn.Close() }
