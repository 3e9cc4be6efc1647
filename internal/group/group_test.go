package group_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/group"
)

// TestDeliverySettingsWin: options the user passes for the group member
// cannot replace the runner's delivery settings.
func TestDeliverySettingsWin(t *testing.T) {
	var assigned bool
	onAssigned := func(context.Context, *kgo.Client, map[string][]int32) { assigned = true }
	user := []kgo.Opt{
		kgo.ConsumerGroup("other"),
		kgo.Balancers(kgo.RoundRobinBalancer()),
		kgo.SessionTimeout(time.Minute),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {}),
		kgo.RebalanceTimeout(42 * time.Second), // not a delivery setting: kept
	}
	opts := group.Opts([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, user, group.Member{
		Group: "app", Topics: []string{"t"}, SessionTimeout: 6 * time.Second,
		OnAssigned: onAssigned, OnRevoked: onAssigned,
		Delivery: []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
	})
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl.Close()
	require.Equal(t, "app", cl.OptValue(kgo.ConsumerGroup))
	bs := cl.OptValue(kgo.Balancers).([]kgo.GroupBalancer)
	require.Len(t, bs, 1)
	require.Equal(t, "range", bs[0].ProtocolName())
	require.Equal(t, 6*time.Second, cl.OptValue(kgo.SessionTimeout))
	require.Equal(t, 2*time.Second, cl.OptValue(kgo.HeartbeatInterval))
	require.Equal(t, true, cl.OptValue(kgo.DisableAutoCommit))
	require.Equal(t, kgo.NewOffset().AtStart(), cl.OptValue(kgo.ConsumeResetOffset))
	require.Equal(t, 42*time.Second, cl.OptValue(kgo.RebalanceTimeout))
	cl.OptValue(kgo.OnPartitionsAssigned).(group.Callback)(context.Background(), cl, nil)
	require.True(t, assigned, "the runner's partition callback is the one installed")

	// The transformer's balancer replaces range assignment, also over
	// the user's.
	cl2, err := kgo.NewClient(group.Opts(nil, user, group.Member{
		Group: "app", Topics: []string{"t"}, SessionTimeout: 6 * time.Second,
		Balancer: group.NewBalancer(group.BalancerConfig{}),
	})...)
	require.NoError(t, err)
	defer cl2.Close()
	bs = cl2.OptValue(kgo.Balancers).([]kgo.GroupBalancer)
	require.Len(t, bs, 1)
	require.Equal(t, group.Protocol, bs[0].ProtocolName())
	require.True(t, bs[0].IsCooperative())

	// An option that contradicts a delivery setting is refused, never
	// silently applied.
	_, err = kgo.NewClient(group.Opts(nil, []kgo.Opt{kgo.AutoCommitMarks()}, group.Member{
		Group: "app", Topics: []string{"t"}, SessionTimeout: 6 * time.Second,
	})...)
	require.Error(t, err)
}
