package transform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/group"
)

// requireChangelogOrNewGroup refuses to start a stateful transformer whose
// changelog is missing while its group has committed input offsets: the
// state those offsets account for is gone with the topic, and creating an
// empty changelog would go on counting from empty state, silently. That
// holds however far the inputs' log start moved: records deleted below it
// still made the state. An application starts with a new changelog only
// when no committed offset accounts for state: a new group, offsets at 0
// (nothing processed), or offsets a state reset committed (their metadata
// is changelog.ResetMarker).
func requireChangelogOrNewGroup(ctx context.Context, adm *kadm.Client, log *slog.Logger, topic, g string, inputs []string) error {
	exists, err := topicExists(ctx, adm, topic)
	if err != nil || exists {
		return err
	}
	offs, err := group.FetchCommitted(ctx, adm, log, g, inputs)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // a new group: nothing committed
	}
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		// A failed fetch is not a "no": refuse rather than risk state loss.
		return fmt.Errorf("runner: changelog %s is missing and the committed offsets of group %s could not be read: %w", topic, g, err)
	}
	var committed []string
	offs.Each(func(o kadm.OffsetResponse) {
		if o.At <= 0 || o.Metadata == changelog.ResetMarker || !slices.Contains(inputs, o.Topic) {
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
			"restore the changelog topic, or, to go on from empty state, stop every instance and reset offsets and state "+
			"(flechtwerk reset %s --state, with --to earliest, latest or a time; it marks the offsets as a state reset)",
		g, committed[0]+moreSuffix(len(committed)-1), g)
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
