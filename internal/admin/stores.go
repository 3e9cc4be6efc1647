package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/store"
)

// storeChangelogs finds the named stores of application app (the timer
// store among them) by their changelog topics,
// changelog.StoreTopic(app, name) with a valid store name, and returns
// their names, sorted. The topic {APP}-{NAME}-changelog is also the
// default changelog of an application named {APP}-{NAME}: when a
// consumer group of that name exists, the topic is taken for that
// application's and left out, with a note saying so.
func storeChangelogs(ctx context.Context, adm *kadm.Client, app string) (names, notes []string, err error) {
	td, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("listing topics for the stores of %s: %w", app, err)
	}
	prefix := app + "-"
	for _, t := range td.Names() {
		name, ok := strings.CutPrefix(t, prefix)
		if !ok {
			continue
		}
		if name, ok = strings.CutSuffix(name, "-changelog"); ok && store.ValidName(name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil, nil
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("listing groups for the stores of %s: %w", app, err)
	}
	kept := names[:0]
	for _, name := range names {
		other := app + "-" + name
		if slices.Contains(groups.Groups(), other) {
			notes = append(notes, fmt.Sprintf("topic %s is taken for the changelog of application %s (a group of that name exists), not of a store %q of %s",
				changelog.StoreTopic(app, name), other, name, app))
			continue
		}
		kept = append(kept, name)
	}
	slices.Sort(kept)
	return kept, notes, nil
}
