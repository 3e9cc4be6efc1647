package configtopic

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/authz"
	"github.com/flechtwerk/flechtwerk/internal/lso"
)

// readRange reads partition of topic with read_committed isolation from
// offset from up to (not including) end, the last stable offset listed
// before, and calls fn for every data record below end in offset order
// (lso.ReadRange: it ends by fetch position, like changelog.Restore).
func readRange(ctx context.Context, cl *kgo.Client, topic string, partition int32, from, end int64, fn func(*kgo.Record) error) error {
	return lso.ReadRange(ctx, cl, topic, partition, from, end, func(rs []*kgo.Record) error {
		for _, r := range rs {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	}, func(offset int64, err error) error {
		return fmt.Errorf("configtopic: reading topic %s partition %d at offset %d: %w", topic, partition, offset, readACL(err, topic))
	})
}

// readACL names the ACL a refused read of a config topic needed.
func readACL(err error, topic string) error {
	return authz.Wrap(err, "Read", map[authz.Resource]string{authz.Topic: topic})
}
