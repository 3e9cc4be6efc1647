package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/authz"
)

// ACL names the group ACL a refused group request needed (Read on the
// group; see authz.Wrap).
func ACL(err error, group string) error {
	return authz.Wrap(err, "Read", map[authz.Resource]string{authz.Group: group})
}

// FirstFetchError returns the first error of a poll, worded by FetchError;
// a canceled or expired poll context is no error.
func FirstFetchError(fetches kgo.Fetches) error {
	var ferr error
	fetches.EachError(func(t string, p int32, err error) {
		if IgnoredPollError(err) {
			return
		}
		if ferr == nil {
			ferr = FetchError(t, p, err)
		}
	})
	return ferr
}

// IgnoredPollError reports an error of a poll that is none: its context
// was canceled or expired.
func IgnoredPollError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// FetchError words an error of a poll. kgo reports the loss of the group
// session (the member was removed from the group, or could not rejoin it)
// as an error of topic "" partition 0.
func FetchError(topic string, partition int32, err error) error {
	var lost *kgo.ErrGroupSession
	if errors.As(err, &lost) {
		return fmt.Errorf("runner: lost the consumer group session (the member was removed from the group or could not rejoin it; its tasks were torn down): %w", err)
	}
	return fmt.Errorf("runner: fetching topic %s partition %d: %w", topic, partition, err)
}
