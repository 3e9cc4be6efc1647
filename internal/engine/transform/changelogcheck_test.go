package transform

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestRequireChangelogOrNewGroup: a stateful application whose changelog
// is missing starts (and gets an empty changelog) only when no committed
// offset accounts for state: a new group, offsets at 0 (nothing
// processed), or offsets a state reset committed (changelog.ResetMarker).
// Any other committed offset is CHANGELOG_MISSING, also when the input's
// records below it were deleted (its log start reached or passed it): the
// state of those records is gone with the changelog and cannot be
// rebuilt.
func TestRequireChangelogOrNewGroup(t *testing.T) {
	ctx := context.Background()
	c := kafkatest.New(t)
	for _, tc := range []struct {
		name      string
		commit    int64  // -1: none
		metadata  string // of the commit
		logStart  int64  // records below it deleted
		changelog bool   // the changelog exists
		missing   bool   // CHANGELOG_MISSING
	}{
		{name: "new group", commit: -1},
		{name: "nothing processed", commit: 0},
		{name: "offsets past the log start", commit: 6, missing: true},
		{name: "input expired up to the offset", commit: 10, logStart: 10, missing: true},
		{name: "input expired past the offset", commit: 6, logStart: 8, missing: true},
		{name: "state reset", commit: 10, metadata: changelog.ResetMarker, logStart: 10},
		{name: "state reset, input kept", commit: 4, metadata: changelog.ResetMarker},
		{name: "changelog exists", commit: 10, logStart: 10, changelog: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, in := kafkatest.Name("app"), kafkatest.Name("in")
			c.CreateTopic(t, in, 2)
			var recs []*kgo.Record
			for i := range 10 {
				recs = append(recs, &kgo.Record{Topic: in, Partition: 1, Value: fmt.Append(nil, i)})
			}
			c.Produce(t, recs...)
			if tc.logStart > 0 {
				os := kadm.Offsets{}
				os.Add(kadm.Offset{Topic: in, Partition: 1, At: tc.logStart})
				resp, err := c.Adm.DeleteRecords(ctx, os)
				require.NoError(t, err)
				require.NoError(t, resp.Error())
			}
			if tc.commit >= 0 {
				os := kadm.Offsets{}
				os.Add(kadm.Offset{Topic: in, Partition: 1, At: tc.commit, LeaderEpoch: -1, Metadata: tc.metadata})
				os.Add(kadm.Offset{Topic: in, Partition: 0, At: 0, LeaderEpoch: -1, Metadata: tc.metadata})
				require.NoError(t, c.Adm.CommitAllOffsets(ctx, app, os))
			}
			if tc.changelog {
				c.CreateTopic(t, changelog.Topic(app), 2)
			}
			err := requireChangelogOrNewGroup(ctx, c.Adm, slog.New(slog.DiscardHandler), changelog.Topic(app), app, []string{in})
			if !tc.missing {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, flechtwerk.ErrChangelogMissing)
			require.Contains(t, err.Error(), changelog.Topic(app))
			require.Contains(t, err.Error(), fmt.Sprintf("%s/1@%d", in, tc.commit))
			require.Contains(t, err.Error(), "flechtwerk reset "+app+" --state")
		})
	}
}

// TestRequireStoreChangelog: a store's missing changelog is refused only
// when a committed offset of an input, past 0, names the store in its
// metadata; offsets that name other stores, none, or carry the reset
// marker, and offsets of other topics, let the store start empty.
func TestRequireStoreChangelog(t *testing.T) {
	ctx := context.Background()
	c := kafkatest.New(t)
	seen := changelog.StoresMetadata([]string{"seen", changelog.TimersName})
	for _, tc := range []struct {
		name     string
		commit   int64 // -1: none
		metadata string
		other    bool // the commit is of a topic that is not an input
		exists   bool // the store's changelog exists
		missing  bool // CHANGELOG_MISSING
	}{
		{name: "new group", commit: -1},
		{name: "offsets name the store", commit: 6, metadata: seen, missing: true},
		{name: "offsets name other stores", commit: 6, metadata: changelog.StoresMetadata([]string{"totals"})},
		{name: "offsets name no store", commit: 6, metadata: "kgo-member"},
		{name: "state reset", commit: 6, metadata: changelog.ResetMarker},
		{name: "nothing processed", commit: 0, metadata: seen},
		{name: "not an input", commit: 6, metadata: seen, other: true},
		{name: "changelog exists", commit: 6, metadata: seen, exists: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, in, other := kafkatest.Name("app"), kafkatest.Name("in"), kafkatest.Name("other")
			c.CreateTopic(t, in, 2)
			c.CreateTopic(t, other, 2)
			topic := changelog.StoreTopic(app, "seen")
			if tc.commit >= 0 {
				committed := in
				if tc.other {
					committed = other
				}
				os := kadm.Offsets{}
				os.Add(kadm.Offset{Topic: committed, Partition: 1, At: tc.commit, LeaderEpoch: -1, Metadata: tc.metadata})
				require.NoError(t, c.Adm.CommitAllOffsets(ctx, app, os))
			}
			if tc.exists {
				c.CreateTopic(t, topic, 2)
			}
			err := requireStoreChangelog(ctx, c.Adm, slog.New(slog.DiscardHandler), topic, "seen", app, []string{in})
			if !tc.missing {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, flechtwerk.ErrChangelogMissing)
			require.ErrorContains(t, err, topic)
			require.ErrorContains(t, err, "store seen")
			require.ErrorContains(t, err, fmt.Sprintf("%s/1@%d", in, tc.commit))
		})
	}
}
