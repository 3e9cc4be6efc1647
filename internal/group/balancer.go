package group

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Protocol is the group protocol name of Balancer in the default
// transaction mode (a producer per task), SharedProtocol in the
// shared-producer mode. A member that offers no protocol in common with
// the group's members cannot join it (INCONSISTENT_GROUP_PROTOCOL): a
// group never mixes the modes.
const (
	Protocol       = "flechtwerk-cooperative-v1"
	SharedProtocol = "flechtwerk-cooperative-shared-v1"
)

// BalancerConfig configures a Balancer.
type BalancerConfig struct {
	// Standbys is the number of standby members per task the balancer
	// computes when this member leads the group (0: none). The leader's
	// setting is the one that counts.
	Standbys int
	// Offsets returns, per task, the next changelog offset of the store
	// this member holds locally; it is sent with every join (nil: none).
	// It is called from the group management goroutine and must not
	// block.
	Offsets func() map[int32]int64
	// OnStandbys, when set, is called with the standby tasks of every
	// assignment this member receives (sorted; empty for none), from the
	// group management goroutine, before the partition callbacks of the
	// assignment. It must not block.
	OnStandbys func(standbys []int32)
	// Shared says that the member runs the shared-producer mode: it
	// speaks SharedProtocol.
	Shared bool
}

// Balancer is the cooperative, sticky, co-partitioning group balancer of
// the transformer runner (a kgo.GroupBalancer). It assigns task numbers
// 0..P-1 as units, task N being partition N of every input topic, see
// Assign. It speaks kgo's "consumer" protocol encoding: members send the
// partitions they own (OwnedPartitions) and their generation, which is
// all stickiness and the cooperative protocol need, and in the userdata
// the local store offsets (see BalancerConfig.Offsets). The plan goes
// through kgo's BalancePlan.AdjustCooperative: a task that moves is first
// only revoked from its owner (that member then rejoins), and assigned to
// its new owner in the rebalance that follows. Sync assignments carry the
// member's standby tasks in their userdata (Standbys).
//
// A Balancer belongs to one client; it is safe for concurrent use.
type Balancer struct {
	cfg BalancerConfig

	mu       sync.Mutex
	standbys []int32
}

// NewBalancer returns a Balancer.
func NewBalancer(cfg BalancerConfig) *Balancer { return &Balancer{cfg: cfg} }

var _ kgo.GroupBalancer = (*Balancer)(nil)

// ProtocolName returns Protocol, or SharedProtocol in the shared-producer
// mode.
func (b *Balancer) ProtocolName() string {
	if b.cfg.Shared {
		return SharedProtocol
	}
	return Protocol
}

// IsCooperative reports true: partitions that do not move stay with their
// member across rebalances.
func (*Balancer) IsCooperative() bool { return true }

// Standbys returns the standby tasks of the last assignment this member
// received (sorted; nil for none).
func (b *Balancer) Standbys() []int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.standbys)
}

// JoinGroupMetadata encodes the member's interests, what it owns now (as
// OwnedPartitions), the generation of that and its local store offsets.
func (b *Balancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	for topic, ps := range current {
		owned := kmsg.NewConsumerMemberMetadataOwnedPartition()
		owned.Topic = topic
		owned.Partitions = ps
		meta.OwnedPartitions = append(meta.OwnedPartitions, owned)
	}
	sort.Slice(meta.OwnedPartitions, func(i, j int) bool { return meta.OwnedPartitions[i].Topic < meta.OwnedPartitions[j].Topic })
	var d memberData
	if b.cfg.Offsets != nil {
		d.Offsets = b.cfg.Offsets()
	}
	meta.UserData = d.encode()
	return meta.AppendTo(nil)
}

// ParseSyncAssignment decodes the member's assignment and stashes its
// standby tasks. Userdata that cannot be decoded counts as no standbys.
func (b *Balancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(assignment); err != nil {
		return nil, fmt.Errorf("group: sync assignment of protocol %s: %w", b.ProtocolName(), err)
	}
	m := make(map[string][]int32, len(a.Topics))
	for _, t := range a.Topics {
		m[t.Topic] = t.Partitions
	}
	var standbys []int32
	if len(a.UserData) > 0 {
		if d, err := decodeAssignmentData(a.UserData); err == nil && len(d.Standbys) > 0 {
			standbys = d.Standbys
		}
	}
	b.mu.Lock()
	b.standbys = standbys
	b.mu.Unlock()
	if b.cfg.OnStandbys != nil {
		b.cfg.OnStandbys(slices.Clone(standbys))
	}
	return m, nil
}

// MemberBalancer parses the members' metadata (kgo's consumer protocol).
func (b *Balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(balance{b}, members)
	if err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

type balance struct{ b *Balancer }

// Balance runs Assign over the members and turns it into a cooperative
// plan: partition N of each topic a member is interested in for each task
// N it gets, minus what moves (AdjustCooperative).
func (bal balance) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	var tasks int32
	for _, n := range topics {
		tasks = max(tasks, n)
	}
	var states []MemberState
	interests := map[string][]string{}
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		s := MemberState{ID: m.MemberID, Generation: meta.Generation}
		for _, o := range meta.OwnedPartitions {
			s.Tasks = append(s.Tasks, o.Partitions...)
		}
		slices.Sort(s.Tasks)
		s.Tasks = slices.Compact(s.Tasks)
		if d, err := decodeMemberData(meta.UserData); err == nil {
			s.Offsets = d.Offsets // else: no information from this member
		}
		states = append(states, s)
		interests[m.MemberID] = meta.Topics
	})
	a := Assign(states, tasks, bal.b.cfg.Standbys)
	plan := cb.NewPlan()
	byID := map[string]*kmsg.JoinGroupResponseMember{}
	for i := range cb.Members() {
		byID[cb.Members()[i].MemberID] = &cb.Members()[i]
	}
	for id, ts := range a.Active {
		for _, topic := range interests[id] {
			for _, t := range ts {
				if t < topics[topic] {
					plan.AddPartition(byID[id], topic, t)
				}
			}
		}
	}
	plan.AdjustCooperative(cb)
	return syncPlan{plan: plan.AsMemberIDMap(), standby: a.Standby}
}

// syncPlan is a plan with the standby tasks in each member's userdata.
type syncPlan struct {
	plan    map[string]map[string][]int32
	standby map[string][]int32
}

func (p syncPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	out := make([]kmsg.SyncGroupRequestGroupAssignment, 0, len(p.plan))
	for member, assigned := range p.plan {
		var a kmsg.ConsumerMemberAssignment
		for topic, ps := range assigned {
			slices.Sort(ps)
			t := kmsg.NewConsumerMemberAssignmentTopic()
			t.Topic, t.Partitions = topic, ps
			a.Topics = append(a.Topics, t)
		}
		sort.Slice(a.Topics, func(i, j int) bool { return a.Topics[i].Topic < a.Topics[j].Topic })
		a.UserData = assignmentData{Standbys: p.standby[member]}.encode()
		s := kmsg.NewSyncGroupRequestGroupAssignment()
		s.MemberID = member
		s.MemberAssignment = a.AppendTo(nil)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MemberID < out[j].MemberID })
	return out
}
