package group

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Callback is a partition callback of the group member.
type Callback = func(context.Context, *kgo.Client, map[string][]int32)

// Member is what a runner decides about its group member. None of it can be
// changed by the user's options.
type Member struct {
	// Group is the consumer group (the application id).
	Group string
	// Topics are the topics the group is joined on.
	Topics []string
	// SessionTimeout is the group session timeout; the heartbeat interval
	// is a third of it, at most 3s.
	SessionTimeout time.Duration
	// OnAssigned is called for assigned partitions, OnRevoked for revoked
	// and lost ones.
	OnAssigned, OnRevoked Callback
	// Delivery are further options of the runner (isolation level, reset
	// offset, rebalance blocking); they win over the user's too.
	Delivery []kgo.Opt
	// Balancer is the group's only balancer; nil is kgo's eager
	// RangeBalancer.
	Balancer kgo.GroupBalancer
}

// Opts returns the options of a group member: base (seed brokers, logger,
// the user's client options), then user (the user's consumer options), then
// the member's delivery settings. franz-go applies options in order, so the
// delivery settings — the balancer, no auto-commit, the partition
// callbacks, the session — always win over an option the user passed.
func Opts(base, user []kgo.Opt, m Member) []kgo.Opt {
	bal := m.Balancer
	if bal == nil {
		bal = kgo.RangeBalancer()
	}
	opts := slices.Concat(base, user)
	opts = append(opts,
		kgo.ConsumerGroup(m.Group),
		kgo.ConsumeTopics(m.Topics...),
		kgo.Balancers(bal),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(m.SessionTimeout),
		// kgo refuses a heartbeat interval at or above the session
		// timeout; its 3s default breaks short session timeouts.
		kgo.HeartbeatInterval(min(3*time.Second, m.SessionTimeout/3)),
		kgo.OnPartitionsAssigned(m.OnAssigned),
		kgo.OnPartitionsRevoked(m.OnRevoked),
		kgo.OnPartitionsLost(m.OnRevoked),
	)
	return append(opts, m.Delivery...)
}

// Held counts, per partition number, how many of the group's topics an
// assignment gives this member: range assignment and Balancer over
// co-partitioned topics give each held number once per topic.
func Held(assigned map[string][]int32) map[int32]int {
	held := map[int32]int{}
	for _, ps := range assigned {
		for _, p := range ps {
			held[p]++
		}
	}
	return held
}
