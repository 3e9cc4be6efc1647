// Package group builds the options of the engines' consumer group members,
// in one place for the transformer, sink and extractor engines, holds the
// transformer engine's group balancer, and the group requests they share:
// committed offsets with patience for a coordinator that is not ready
// (offsets.go), the group's lag, and the wording of poll errors.
//
// # Balancer
//
// Balancer (protocol "flechtwerk-cooperative-v1") is a client-side
// cooperative, sticky, co-partitioning balancer: the group's leader runs
// Assign over the members' join metadata, task N (partition N of every
// input topic) moving as one unit, and kgo's cooperative protocol
// (KIP-429, BalancePlan.AdjustCooperative) carries it out in two rounds: a
// task that moves is revoked from its owner in the first rebalance and
// assigned to its new owner in the second, which the revoking member
// triggers by rejoining. Tasks that do not move stay assigned throughout:
// their member is never told to give them up.
//
// The balance is computed by the client, not by the broker (KIP-848's
// server-side assignors): those can only see the members' subscriptions
// and owned partitions, while placing a task where its store is closest
// to the changelog's end needs what each member holds locally (the
// offsets in the join metadata's userdata) — only the streams-group
// protocol of KIP-1071 would let the broker do that. The same data lets
// the leader pick standby members per task (BalancerConfig.Standbys);
// each member receives its standby tasks in its sync assignment's
// userdata (Balancer.Standbys, BalancerConfig.OnStandbys).
//
// The userdata of joins and assignments is versioned (userdata.go); a
// member whose userdata cannot be decoded is balanced as one with no local
// stores, and an assignment whose userdata cannot be decoded has no
// standbys: bytes from another process never make the balancer fail or
// panic.
//
// A group has one protocol in common or none: every member of a
// transformer offers only this one, so a member of another application
// (or an older version) using the same group id cannot join, and a member
// that did join with other input topics is caught by the runner's check of
// every assignment (a task number must come for every input topic).
//
// # Concurrency
//
// kgo calls a Balancer from its group management goroutine; Standbys may
// be called from any goroutine.
package group
