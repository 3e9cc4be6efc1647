package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Evict removes from group the members of a dead process, those with
// client ID clientID, by a LeaveGroup (v3+) naming their member IDs: what
// the session timeout does on Apache Kafka. It works on any cluster, but
// only kfake needs it: tests evict the members of the processes they
// killed on kfake, whose classic group coordinator can keep
// a dead member for ever or stall the group: a member whose connection
// closed while its JoinGroup waited is kept without a session timer
// (TestKfakeKeepsMemberKilledInJoin), and a dead leader can leave a
// rebalance waiting (see the chaos suite). It returns the member IDs it
// removed, once two describes in a row list none (a JoinGroup the process
// sent before it died may land late); errors are retried for 10s, and it
// gives up after 30s (a live process of that client ID would rejoin for
// ever).
//
// A member removed while its SyncGroup waits skews kfake's count of joined
// members just as its session timeout would, so while the group completes
// a rebalance Evict gives a live leader a moment to sync first (then every
// SyncGroup is answered); a dead leader never syncs, and removing it is
// safe: kfake holds no SyncGroup of the leader.
func (c *Cluster) Evict(ctx context.Context, group, clientID string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(c.clientOpts()...)
	if err != nil {
		return nil, fmt.Errorf("evict %s from group %s: %w", clientID, group, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var (
		removed    []string
		quiet      int
		completing time.Time
		deadline   = time.Now().Add(10 * time.Second)
	)
	// retry reports whether to try an error again.
	retry := func() bool {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		sleep(ctx, 100*time.Millisecond)
		return true
	}
	for quiet < 2 {
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("evict %s from group %s: %w", clientID, group, err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		gs, err := adm.DescribeGroups(rctx, group)
		cancel()
		if err == nil {
			err = gs[group].Err
		}
		if errors.Is(err, kerr.GroupIDNotFound) {
			return removed, nil // no group, no members
		}
		if err != nil {
			if retry() {
				continue
			}
			return removed, fmt.Errorf("evict %s from group %s: describe: %w", clientID, group, err)
		}
		g := gs[group]
		if g.State == "CompletingRebalance" {
			if completing.IsZero() {
				completing = time.Now()
			}
			if time.Since(completing) < 250*time.Millisecond {
				sleep(ctx, 10*time.Millisecond)
				continue
			}
		}
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Group = group
		var ids []string
		for _, m := range g.Members {
			if m.ClientID == clientID {
				rm := kmsg.NewLeaveGroupRequestMember()
				rm.MemberID = m.MemberID
				rm.Reason = kmsg.StringPtr("its process was killed")
				req.Members = append(req.Members, rm)
				ids = append(ids, m.MemberID)
			}
		}
		if len(ids) == 0 {
			quiet++
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		quiet = 0
		rctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		resp, err := req.RequestWith(rctx, cl)
		cancel()
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			if retry() {
				continue
			}
			return removed, fmt.Errorf("evict %s (members %v) from group %s: %w", clientID, ids, group, err)
		}
		if len(resp.Members) != len(ids) {
			return removed, fmt.Errorf("evict %s from group %s: LeaveGroup v%d answered %d of members %v (v3+ needed)",
				clientID, group, resp.Version, len(resp.Members), ids)
		}
		for _, m := range resp.Members {
			switch err := kerr.ErrorForCode(m.ErrorCode); {
			case err == nil:
				removed = append(removed, m.MemberID)
			case errors.Is(err, kerr.UnknownMemberID): // gone since the describe
			default:
				return removed, fmt.Errorf("evict %s from group %s: member %s: %w", clientID, group, m.MemberID, err)
			}
		}
	}
	return removed, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
