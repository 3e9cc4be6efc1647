package transform

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// namedStore is wallTimers with a named store.
type namedStore struct {
	wallTimers
	name string
}

func (p namedStore) Stores() []process.StoreSpec { return []process.StoreSpec{{Name: p.name}} }

// TestStoreTopicOfAnotherAppRefused: the changelog of store "x" of app
// A, A-x-changelog, is the default changelog of an application A-x. With
// a consumer group A-x present, A is refused at start-up with
// DUPLICATE_TOPIC naming the topic, before it creates or writes any; with
// another store name, it starts.
func TestStoreTopicOfAnotherAppRefused(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("col-in"), kafkatest.Name("col-out"), kafkatest.Name("col")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The other application's group, with a committed offset.
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: in, Partition: 0, At: 0})
	resp, err := c.Adm.CommitOffsets(ctx, app+"-x", offs)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	run := func(ctx context.Context, store string) error {
		cfg := config.Defaults(config.Transformer)
		cfg.Brokers, cfg.ApplicationID, cfg.InputTopics, cfg.StateDir = c.Brokers, app, []string{in}, t.TempDir()
		cfg.Logger = testLogger()
		require.NoError(t, cfg.Validate(config.Transformer, true))
		cfg.EnsureLogger()
		m, err := imetrics.New(nil, app)
		require.NoError(t, err)
		cfg.Metrics = m
		return Run(ctx, Params{Cfg: &cfg, Proc: namedStore{wallTimers{out: out}, store}, Ops: &testOps{}})
	}
	err = run(ctx, "x")
	require.ErrorIs(t, err, flechtwerk.ErrDuplicateTopic)
	require.ErrorContains(t, err, changelog.StoreTopic(app, "x"))
	require.ErrorContains(t, err, "application "+app+"-x")
	d, err := c.Adm.ListTopics(ctx, changelog.TimersTopic(app))
	require.NoError(t, err)
	require.Error(t, d[changelog.TimersTopic(app)].Err, "no store topic created")

	short, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	require.NoError(t, run(short, "y"), "another store name starts (and stops with ctx)")
}
