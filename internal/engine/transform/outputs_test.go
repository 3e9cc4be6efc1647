package transform

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

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

	require.NoError(t, ensureOutputs(ctx, c.Adm, nil, []string{"in"}, nil, -1), "nothing declared")
	require.NoError(t, ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: exists}}, []string{"in"}, nil, -1))

	err := ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: missing}, {Topic: exists}, {Topic: missing2}}, []string{"in"}, nil, -1)
	require.ErrorIs(t, err, flechtwerk.ErrMissingTopic)
	require.ErrorContains(t, err, missing)
	require.ErrorContains(t, err, missing2)
	topics, err := c.Adm.ListTopics(ctx, missing)
	require.NoError(t, err)
	require.False(t, topics.Has(missing), "not created")

	err = ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: exists, Create: true, Partitions: 3}}, []string{"in"}, nil, -1)
	require.ErrorIs(t, err, flechtwerk.ErrPartitionMismatch)
	require.ErrorContains(t, err, exists)
	require.NoError(t, ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: exists, Create: true, Partitions: 2}}, []string{"in"}, nil, -1))

	err = ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: "in"}}, []string{"in"}, nil, -1)
	require.ErrorIs(t, err, flechtwerk.ErrDuplicateTopic)
	require.ErrorContains(t, err, "output topic in")

	spec := stage.OutputSpec{Topic: created, Create: true, Partitions: 3, Config: map[string]string{"cleanup.policy": "compact"}}
	require.NoError(t, ensureOutputs(ctx, c.Adm, []stage.OutputSpec{spec}, []string{"in"}, nil, -1))
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
	require.NoError(t, ensureOutputs(ctx, c.Adm, []stage.OutputSpec{spec}, []string{"in"}, nil, -1), "a second start finds it")
}

// TestEnsureOutputsReservedTopics: a declared output that is the
// changelog or the dead-letter topic is refused before the cluster is
// asked, naming it.
func TestEnsureOutputsReservedTopics(t *testing.T) {
	reserved := map[string]string{"app-changelog": "the changelog topic", "dlq": "the dead-letter topic"}
	for topic, what := range reserved {
		err := ensureOutputs(context.Background(), nil, []stage.OutputSpec{{Topic: topic}}, []string{"in"}, reserved, -1)
		require.ErrorIs(t, err, flechtwerk.ErrDuplicateTopic)
		require.ErrorContains(t, err, "output topic "+topic)
		require.ErrorContains(t, err, what)
	}
}

// TestEnsureOutputsWaitsForATopicBeingCreated: a declared output whose
// metadata answers LEADER_NOT_AVAILABLE (being created) is looked at
// again until it is ready; one that never gets ready is a coded error
// naming it.
func TestEnsureOutputsWaitsForATopicBeingCreated(t *testing.T) {
	c, fc := kafkatest.Fake(t)
	topic := kafkatest.Name("out")
	c.CreateTopic(t, topic, 2)
	notReady := func(times int) {
		n := 0
		fc.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
			fc.KeepControl()
			req := r.(*kmsg.MetadataRequest)
			if len(req.Topics) != 1 || req.Topics[0].Topic == nil || *req.Topics[0].Topic != topic {
				return nil, nil, false
			}
			if n++; n == times {
				fc.DropControl()
			}
			resp := req.ResponseKind().(*kmsg.MetadataResponse)
			rt := kmsg.NewMetadataResponseTopic()
			rt.Topic = kmsg.StringPtr(topic)
			rt.ErrorCode = kerr.LeaderNotAvailable.Code
			resp.Topics = append(resp.Topics, rt)
			return resp, nil, true
		})
	}
	ctx := context.Background()
	notReady(3)
	require.NoError(t, ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: topic, Create: true, Partitions: 2}}, nil, nil, -1))

	notReady(1000)
	err := ensureOutputs(ctx, c.Adm, []stage.OutputSpec{{Topic: topic}}, nil, nil, -1)
	require.ErrorIs(t, err, flechtwerk.ErrMissingTopic)
	require.ErrorIs(t, err, kerr.LeaderNotAvailable)
	require.ErrorContains(t, err, "output topic "+topic)
}
