package runner

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitDirect commits the offsets of batches that wrote nothing through
// the group member, checked against its generation (see batch).
func (rn *run) commitDirect(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) error {
	rn.commitMu.Lock()
	defer rn.commitMu.Unlock()
	var cerr error
	rn.consumer.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = fmt.Errorf("committing offsets of an interval that wrote nothing: %w", err)
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = fmt.Errorf("committing offset of topic %s partition %d: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	return cerr
}
