package transform

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk/internal/authz"
	"github.com/flechtwerk/flechtwerk/internal/group"
)

// commitDirect commits the offsets of batches that wrote nothing through
// the group member, checked against its generation (see batch). The
// request is refused here, unsent, when the member's ID is no longer
// owner, the one the task runs under (run.owners): kgo reads the member
// and generation just before it sends, and a member that rejoined under
// a new ID holds a valid generation the coordinator would accept. The
// offsets carry the metadata of the transactional ones (run.offsetsMeta).
func (rn *run) commitDirect(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset, owner string) error {
	rn.commitMu.Lock()
	defer rn.commitMu.Unlock()
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		if req.MemberID != owner {
			return fmt.Errorf("the group member rejoined as %s, the task runs under %s: %w", req.MemberID, owner, kerr.UnknownMemberID)
		}
		if rn.offsetsMeta != "" {
			for i := range req.Topics {
				for j := range req.Topics[i].Partitions {
					req.Topics[i].Partitions[j].Metadata = &rn.offsetsMeta
				}
			}
		}
		return nil
	})
	var cerr error
	rn.consumer.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = fmt.Errorf("committing offsets of an interval that wrote nothing: %w", group.ACL(err, rn.c.Group()))
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = fmt.Errorf("committing offset of topic %s partition %d: %w", t.Topic, p.Partition,
						authz.Wrap(err, "Read", map[authz.Resource]string{authz.Topic: t.Topic, authz.Group: rn.c.Group()}))
				}
			}
		}
	})
	return cerr
}
