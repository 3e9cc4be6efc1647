package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// offsetFetchPatience bounds how long a committed-offset fetch waits for a
// coordinator that is not ready before Run fails with an *OffsetFetchError.
const offsetFetchPatience = 30 * time.Second

// fetchCommitted fetches the group's committed offsets of ts, retrying while
// the coordinator is not ready: on a fresh cluster the first group lookup
// answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists, and a
// coordinator that is loading or moving answers
// COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR. Other errors, and a
// coordinator still not ready after offsetFetchPatience, are returned.
func fetchCommitted(ctx context.Context, adm *kadm.Client, log *slog.Logger, g string, ts []string) (kadm.OffsetResponses, error) {
	deadline := time.Now().Add(offsetFetchPatience)
	backoff := 50 * time.Millisecond
	for {
		resps, err := adm.FetchOffsetsForTopics(ctx, g, ts...)
		if err == nil {
			// A partition's error can be the coordinator's too.
			resps.Each(func(o kadm.OffsetResponse) {
				if err == nil && coordinatorNotReady(o.Err) {
					err = o.Err
				}
			})
			if err == nil {
				return resps, nil
			}
		}
		if !coordinatorNotReady(err) || time.Now().Add(backoff).After(deadline) {
			if coordinatorNotReady(err) {
				err = fmt.Errorf("coordinator not ready after %v: %w", offsetFetchPatience, err)
			}
			return resps, groupACL(err, g)
		}
		log.Debug("offset fetch: coordinator not ready, retrying", "group", g, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// coordinatorNotReady reports a transient group coordinator error, or
// UNSTABLE_OFFSET_COMMIT: a require-stable fetch met a transaction with
// offsets of the group that is still being completed (right after a fence
// aborted it).
func coordinatorNotReady(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.UnstableOffsetCommit)
}
