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
	return requireChangelog(ctx, adm, log, topic, g, inputs, "the changelog", func(o kadm.OffsetResponse) bool {
		return o.Metadata != changelog.ResetMarker
	})
}

// requireStoreChangelog refuses to start a processor whose named store
// (or timer store) name has lost its changelog topic while a committed
// input offset names the store in its metadata (changelog.NamesStore):
// that offset accounts for state the topic held. A store no committed
// offset names was added to the application and starts empty: offsets
// committed before the runner recorded store names, or by other means,
// name none.
func requireStoreChangelog(ctx context.Context, adm *kadm.Client, log *slog.Logger, topic, name, g string, inputs []string) error {
	return requireChangelog(ctx, adm, log, topic, g, inputs, "the changelog of store "+name, func(o kadm.OffsetResponse) bool {
		return changelog.NamesStore(o.Metadata, name)
	})
}

// requireChangelog refuses with CHANGELOG_MISSING when topic (what
// names it) does not exist and a committed offset of an input, past 0,
// accounts for state it held (accounts).
func requireChangelog(ctx context.Context, adm *kadm.Client, log *slog.Logger, topic, g string, inputs []string, what string, accounts func(kadm.OffsetResponse) bool) error {
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
		return fmt.Errorf("runner: %s %s is missing and the committed offsets of group %s could not be read: %w", what, topic, g, err)
	}
	var committed []string
	offs.Each(func(o kadm.OffsetResponse) {
		if o.At <= 0 || !slices.Contains(inputs, o.Topic) || !accounts(o) {
			return
		}
		committed = append(committed, fmt.Sprintf("%s/%d@%d", o.Topic, o.Partition, o.At))
	})
	if len(committed) == 0 {
		return nil
	}
	slices.Sort(committed)
	return flechtwerk.Errorf(flechtwerk.CodeChangelogMissing, "topic "+topic,
		"%s does not exist, but group %s has committed input offsets (%s): the state they account for is gone; "+
			"restore the changelog topic, or, to go on from empty state, stop every instance and reset offsets and state "+
			"(flechtwerk reset %s --state, with --to earliest, latest or a time; it marks the offsets as a state reset)",
		what, g, committed[0]+moreSuffix(len(committed)-1), g)
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
