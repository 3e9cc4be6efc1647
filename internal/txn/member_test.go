package txn

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// memberCase is one group and one task's transactional ID: its outputs
// and its input, whose offsets the transactions commit.
type memberCase struct {
	*handover
	ctx context.Context
}

func newMemberCase(t *testing.T) *memberCase {
	c := kafkatest.New(t)
	h := &handover{c: c, id: kafkatest.Name("app") + "-0", group: kafkatest.Name("app"),
		in: kafkatest.Name("in"), out: kafkatest.Name("out"), clog: kafkatest.Name("changelog")}
	c.CreateTopic(t, h.in, 1)
	c.CreateTopic(t, h.out, 1)
	c.CreateTopic(t, h.clog, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	td, err := c.Adm.ListTopics(ctx, h.in)
	require.NoError(t, err)
	h.inID = td[h.in].ID
	return &memberCase{handover: h, ctx: ctx}
}

// begin opens a transaction the way a task does, offsets partition first,
// and sends outputs records into it.
func (m *memberCase) begin(t *testing.T, p *Producer, outputs int) *Txn {
	t.Helper()
	x, err := p.Begin(m.ctx)
	require.NoError(t, err)
	require.NoError(t, x.AddOffsets(m.ctx, m.group))
	for range outputs {
		v := strconv.Itoa(m.sent)
		m.sent++
		x.Send(&kgo.Record{Topic: m.out, Key: []byte("k" + v), Value: []byte(v)})
	}
	return x
}

// offsetsOf are the offsets up to m.sent, committed in the name of member.
func (m *memberCase) offsetsOf(member func() (string, int32)) *Offsets {
	o := m.offsets()
	o.Member = member
	return o
}

// directCommit commits next through the group member itself, checked by
// its generation: the runner's commit of an interval that wrote nothing.
func directCommit(t *testing.T, ctx context.Context, mb *kafkatest.Member, topic string, next int64) {
	t.Helper()
	var cerr error
	mb.Client().CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: -1, Offset: next}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			cerr = err
			if err == nil {
				for _, rt := range resp.Topics {
					for _, rp := range rt.Partitions {
						if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
							cerr = e
						}
					}
				}
			}
		})
	require.NoError(t, cerr)
}

// TestStaleMemberCannotCommitOffsets plays a zombie that holds the task's
// newest producer epoch (its fence landed after the new owner's) but
// whose group member left: it commits outputs of records 10-11 with
// offset 12, and the new owner, the group's current member, commits its
// offset 10 of records that wrote nothing. The zombie's transaction is
// refused by the group (its member is unknown or its generation stale)
// and aborted: nothing of it is visible, and the group offset is the
// owner's 10, so the next owner resumes at 10 and every output appears
// once. A transaction that was opened while its member was current and
// ends after the member left is refused the same way (a rebalance between
// AddOffsetsToTxn and TxnOffsetCommit). With generation -1 (the
// coordinator checks only the epoch) both transactions commit and the
// owner's commit rewinds the offset below their outputs.
func TestStaleMemberCannotCommitOffsets(t *testing.T) {
	for _, opened := range []string{"after the member left", "before the member left"} {
		t.Run("opened "+opened, func(t *testing.T) {
			m := newMemberCase(t)
			m.sent = 10
			zombie := m.c.JoinGroup(t, m.group, m.in)
			stale, gen := zombie.Identity()
			p := m.open(t)
			defer p.Close()
			var x *Txn
			if opened == "before the member left" {
				x = m.begin(t, p, 2)
			}
			zombie.Leave()
			owner := m.c.JoinGroup(t, m.group, m.in)
			_, ownerGen := owner.Identity()
			t.Logf("zombie member %s generation %d; owner generation %d", stale, gen, ownerGen)
			if x == nil {
				x = m.begin(t, p, 2)
			}
			_, err := x.End(m.ctx, m.offsetsOf(func() (string, int32) { return stale, gen }))
			require.Error(t, err, "the zombie's transaction must be refused")
			require.True(t, errorsIsAny(err, kerr.UnknownMemberID, kerr.IllegalGeneration), "refused by the group: %v", err)
			require.True(t, Transient(err), "a refused generation re-initializes the task: %v", err)

			directCommit(t, m.ctx, owner, m.in, 10)
			m.c.WaitSettled(t, m.out)
			require.Empty(t, m.c.ReadCommitted(t, m.out), "outputs of the zombie's transaction")
			require.Equal(t, map[int32]int64{0: 10}, m.c.CommittedOffsets(t, m.group, m.in))
		})
	}
}

// TestCurrentMemberCommitsAcrossRebalance opens a transaction under the
// group's current member, lets another member join (a rebalance that
// moves the generation on while the transaction is open, between
// AddOffsetsToTxn and TxnOffsetCommit), and commits: the member still owns
// the partition, its identity is read when the offsets are sent, and the
// transaction commits. An identity read before the rebalance and refused
// as stale is sent again once the member holds the newer generation.
func TestCurrentMemberCommitsAcrossRebalance(t *testing.T) {
	m := newMemberCase(t)
	owner := m.c.JoinGroup(t, m.group, m.in)
	_, before := owner.Identity()
	p := m.open(t)
	defer p.Close()

	x := m.begin(t, p, 3)
	other := m.c.JoinGroup(t, m.group, m.in)
	kafkatest.WaitFor(t, 60*time.Second, "owner in the new generation", func() bool {
		_, g := owner.Identity()
		_, og := other.Identity()
		return g > before && g == og
	})
	_, err := x.End(m.ctx, m.offsetsOf(owner.Identity))
	require.NoError(t, err)

	// The identity read before the rebalance first: refused, then sent
	// again with the newer generation.
	id, now := owner.Identity()
	var reads atomic.Int32
	x = m.begin(t, p, 2)
	_, err = x.End(m.ctx, m.offsetsOf(func() (string, int32) {
		if reads.Add(1) == 1 {
			return id, before
		}
		return id, now
	}))
	require.NoError(t, err)
	require.GreaterOrEqual(t, reads.Load(), int32(2), "the stale generation was refused and sent again")

	m.c.WaitSettled(t, m.out)
	require.Len(t, m.c.ReadCommitted(t, m.out), 5)
	require.Equal(t, map[int32]int64{0: int64(m.sent)}, m.c.CommittedOffsets(t, m.group, m.in))
}

// TestOffsetsNeedMember: offsets without a member, or of a member with no
// generation, are refused before anything is sent, never committed with
// generation -1 (which the coordinator would take unchecked).
func TestOffsetsNeedMember(t *testing.T) {
	m := newMemberCase(t)
	p := m.open(t)
	defer p.Close()
	_, err := m.begin(t, p, 1).End(m.ctx, m.offsetsOf(nil))
	require.ErrorIs(t, err, ErrNoMember)
	require.False(t, Transient(err), "a task without a member is a programming error")

	p2 := m.open(t)
	defer p2.Close()
	_, err = m.begin(t, p2, 1).End(m.ctx, m.offsetsOf(func() (string, int32) { return "", -1 }))
	require.ErrorIs(t, err, ErrNoMember)
	require.True(t, Transient(err), "a member that lost its session rejoins: %v", err)
	m.c.WaitSettled(t, m.out)
	require.Empty(t, m.c.ReadCommitted(t, m.out))
	require.Empty(t, m.c.CommittedOffsets(t, m.group, m.in))
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
