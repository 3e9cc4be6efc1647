package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/flechtwerk/flechtwerk"
)

// requireChangelogOrNewGroup refuses to start a stateful transformer whose
// changelog is missing while its group has committed input offsets: the
// state those offsets account for is gone with the topic, and creating an
// empty changelog would go on counting from empty state, silently. A new
// application (no committed offsets past the inputs' log start) gets its
// changelog created by Ensure.
func requireChangelogOrNewGroup(ctx context.Context, adm *kadm.Client, log *slog.Logger, topic, group string, inputs []string) error {
	exists, err := topicExists(ctx, adm, topic)
	if err != nil || exists {
		return err
	}
	offs, err := fetchCommitted(ctx, adm, log, group, inputs)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // a new group: nothing committed
	}
	if err != nil {
		// A failed fetch is not a "no": refuse rather than risk state loss.
		return fmt.Errorf("runner: changelog %s is missing and the committed offsets of group %s could not be read: %w", topic, group, err)
	}
	// An offset at the log start accounts for nothing (e.g. after a
	// reset to the earliest offsets): only offsets past it carry state.
	starts, err := adm.ListStartOffsets(ctx, inputs...)
	if err != nil {
		return fmt.Errorf("runner: changelog %s is missing and the start offsets of the inputs could not be read: %w", topic, err)
	}
	var committed []string
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil || o.At < 0 || !slices.Contains(inputs, o.Topic) {
			return
		}
		if st, ok := starts.Lookup(o.Topic, o.Partition); ok && st.Err == nil && o.At <= st.Offset {
			return
		}
		committed = append(committed, fmt.Sprintf("%s/%d@%d", o.Topic, o.Partition, o.At))
	})
	if len(committed) == 0 {
		return nil
	}
	slices.Sort(committed)
	return flechtwerk.Errorf(flechtwerk.CodeChangelogMissing, "topic "+topic,
		"the changelog does not exist, but group %s has committed input offsets (%s): the state they account for is gone; "+
			"restore the changelog topic, or reset the application to reprocess from the start (flechtwerk reset %s --state)",
		group, committed[0]+moreSuffix(len(committed)-1), group)
}

func moreSuffix(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" and %d more", n)
}

func topicExists(ctx context.Context, adm *kadm.Client, topic string) (bool, error) {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("runner: describing changelog %s: %w", topic, err)
	}
	d, ok := details[topic]
	return ok && d.Err == nil, nil
}
