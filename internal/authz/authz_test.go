package authz

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/flechtwerk/flechtwerk"
)

func TestWrap(t *testing.T) {
	names := map[Resource]string{Topic: "out", Group: "app", TransactionalID: "app-0"}
	for _, tc := range []struct {
		err  error
		op   string
		want string
	}{
		{fmt.Errorf("produce to out: %w", kerr.TopicAuthorizationFailed), "Write",
			`not authorized: the principal needs ACL Write on topic "out"`},
		{kerr.TransactionalIDAuthorizationFailed, "Write",
			`not authorized: the principal needs ACL Write on transactional-id "app-0" (or prefixed)`},
		{fmt.Errorf("join: %w", kerr.GroupAuthorizationFailed), "Write",
			`not authorized: the principal needs ACL Read on group "app"`},
		{kerr.ClusterAuthorizationFailed, "IdempotentWrite",
			`not authorized: the principal needs ACL IdempotentWrite on cluster "kafka-cluster"`},
	} {
		got := Wrap(tc.err, tc.op, names)
		require.ErrorContains(t, got, tc.want)
		var ae *Error
		require.True(t, errors.As(got, &ae))
		var ke *kerr.Error
		require.True(t, errors.As(got, &ke), "the broker's error stays in the chain")
		require.Same(t, Wrap(got, tc.op, names), got, "wrapping twice is a no-op")
		require.ErrorIs(t, got, flechtwerk.ErrNotAuthorized)
		require.ErrorContains(t, got, string(flechtwerk.CodeNotAuthorized))
	}
	other := errors.New("boom")
	require.Same(t, other, Wrap(other, "Write", names))
	require.Nil(t, Wrap(nil, "Write", names))
}
