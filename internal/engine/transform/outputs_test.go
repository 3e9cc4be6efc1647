package transform

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// TestEnsureOutputs: declared output topics are checked at start, created
// when declared so, and every problem is reported at once, naming its
// topic.
func TestEnsureOutputs(t *testing.T) {
	ctx := context.Background()
	c := kafkatest.New(t)
	exists := kafkatest.Name("exists")
	c.CreateTopic(t, exists, 2)
	missing, missing2, created := kafkatest.Name("missing"), kafkatest.Name("missing2"), kafkatest.Name("created")

	require.NoError(t, ensureOutputs(ctx, c.Adm, nil, []string{"in"}, -1), "nothing declared")
	require.NoError(t, ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: exists}}, []string{"in"}, -1))

	err := ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: missing}, {Topic: exists}, {Topic: missing2}}, []string{"in"}, -1)
	require.ErrorIs(t, err, flechtwerk.ErrMissingTopic)
	require.ErrorContains(t, err, missing)
	require.ErrorContains(t, err, missing2)
	topics, err := c.Adm.ListTopics(ctx, missing)
	require.NoError(t, err)
	require.False(t, topics.Has(missing), "not created")

	err = ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: exists, Create: true, Partitions: 3}}, []string{"in"}, -1)
	require.ErrorIs(t, err, flechtwerk.ErrPartitionMismatch)
	require.ErrorContains(t, err, exists)
	require.NoError(t, ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: exists, Create: true, Partitions: 2}}, []string{"in"}, -1))

	err = ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: "in"}}, []string{"in"}, -1)
	require.ErrorIs(t, err, flechtwerk.ErrDuplicateTopic)
	require.ErrorContains(t, err, "output topic in")

	spec := stage.OutputSpec{Topic: created, Create: true, Partitions: 3, Config: map[string]string{"cleanup.policy": "compact"}}
	require.NoError(t, ensureOutputs(ctx, c.Adm, []stage.OutputSpec{spec}, []string{"in"}, -1))
	c.WaitTopic(t, created, 3)
	rcs, err := c.Adm.DescribeTopicConfigs(ctx, created)
	require.NoError(t, err)
	rc, err := rcs.On(created, nil)
	require.NoError(t, err)
	policy := ""
	for _, cfg := range rc.Configs {
		if cfg.Key == "cleanup.policy" && cfg.Value != nil {
			policy = *cfg.Value
		}
	}
	require.Equal(t, "compact", policy)
	require.NoError(t, ensureOutputs(ctx, c.Adm, []stage.OutputSpec{spec}, []string{"in"}, -1), "a second start finds it")
}
