package integration

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/standby"
	"github.com/flechtwerk/flechtwerk/task"
)

// TestStandbyReleaseThenTaskReplaysOnlyLag: a standby replica of task 0
// builds the task's store in this directory from the changelog (a full
// restore: there was no store) and tails the commits of the task's owner
// elsewhere. Released, it gives the store up; the owner commits 37 more
// writes; the task starting here (task.Start fences, task.Restore
// restores) replays exactly those 37 records, warm, and ends with the
// state of a full restore.
func TestStandbyReleaseThenTaskReplaysOnlyLag(t *testing.T) {
	c := kafkatest.New(t)
	app := kafkatest.Name("standby")
	topic := changelog.Topic(app)
	c.CreateTopic(t, topic, 1)
	dir := t.TempDir()
	ctx := context.Background()
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}

	other := &owner{app: app, opts: opts, adm: c.Adm}
	require.NoError(t, other.start(ctx))
	require.NoError(t, other.commitN(ctx, 0, 20, 50))

	var logs kafkatest.LogBuffer
	errs := make(chan error, 1)
	m, err := standby.New(standby.Config{
		ApplicationID: app, Changelog: topic, StateDir: dir, Admin: c.Adm, KafkaOpts: opts,
		TransactionTimeout: time.Minute, OnError: func(err error) { errs <- err },
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Set([]int32{0}))
	caughtUp := func() {
		t.Helper()
		end := settledEnd(t, c, topic, 0)
		kafkatest.WaitFor(t, 30*time.Second, "standby at the last stable offset", func() bool {
			select {
			case err := <-errs:
				require.NoError(t, err)
			default:
			}
			return m.Offsets()[0] == end
		})
	}
	// The store's checkpoint reaches the end with the restore's last batch,
	// just before the restore reports.
	kafkatest.WaitFor(t, 30*time.Second, "the standby's first restore", func() bool {
		return strings.Contains(logs.String(), `msg="standby restored" partition=0`)
	})
	caughtUp()
	require.Contains(t, logs.String(), "records=1000 ", "the first standby restore is full: %s", logs.String())
	// Tailed, not restored: commits while the standby runs.
	require.NoError(t, other.commitN(ctx, 1000, 5, 50))
	caughtUp()
	require.NoError(t, m.Release(0))
	require.Empty(t, m.Tasks())
	require.NoError(t, m.Release(0), "a second Release is a no-op")

	// The standby's lag: written after it was released.
	require.NoError(t, other.commitN(ctx, 1250, 1, 37))
	other.p.Close()

	proc, ok := stage.TransformerOf(counter(app + "-out"))
	require.True(t, ok)
	var tlogs kafkatest.LogBuffer
	tk, err := task.Start(ctx, task.Config{
		ApplicationID: app, Partition: 0, InputTopics: []string{app + "-in"},
		Changelog: topic, StateDir: dir, TransactionTimeout: time.Minute,
		KafkaOpts: opts, Logger: slog.New(slog.NewTextHandler(&tlogs, nil)),
	}, proc)
	require.NoError(t, err)
	defer tk.Close()
	require.NoError(t, tk.Restore(ctx, c.Adm))
	require.Contains(t, tlogs.String(), `msg="task restored" partition=0`)
	require.Contains(t, tlogs.String(), "records=37 ", "only the standby's lag is replayed: %s", tlogs.String())
	require.Contains(t, tlogs.String(), "full=false", tlogs.String())

	want, all := coldState(t, c, app)
	require.Equal(t, 1287, all, "a full restore replays the whole partition")
	require.Equal(t, want, contents(t, tk.Store()))
}
