package txn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/authz"
)

func TestTransient(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("commit: %w", kerr.CoordinatorNotAvailable), true},
		{fmt.Errorf("commit: %w", kerr.NotCoordinator), true},
		{kerr.RequestTimedOut, true},
		{kerr.ConcurrentTransactions, true},
		{kerr.TransactionAbortable, true},
		{fmt.Errorf("produce to topic out partition 0 failed: %w", kerr.OutOfOrderSequenceNumber), true},
		{fmt.Errorf("TxnOffsetCommit in/0: %w", kerr.RebalanceInProgress), true},
		{kerr.IllegalGeneration, true},
		{kerr.UnknownMemberID, true},
		{fmt.Errorf("unable to dial: %w", dial), true},
		{io.EOF, true},
		{kgo.ErrRecordTimeout, true},
		{fmt.Errorf("commit: %w", context.DeadlineExceeded), true},
		{&kgo.ErrGroupSession{Err: errors.New("the broker connection has died and the request will be retried on a new connection")}, true},

		{nil, false},
		{context.Canceled, false},
		{kgo.ErrClientClosed, false},
		{fencing.Classify("app-0", kerr.InvalidProducerEpoch), false},
		{classifyCommit("app-0", kerr.InvalidTxnState), false},
		{kerr.ProducerFenced, false},
		{kerr.InvalidProducerIDMapping, false},
		{errors.Join(kerr.OutOfOrderSequenceNumber, fmt.Errorf("abort: %w", kerr.InvalidProducerIDMapping)), false},
		{fmt.Errorf("commit: %w", ErrProducerReinitialized), true},
		{authz.Wrap(kerr.TopicAuthorizationFailed, "Write", map[authz.Resource]string{authz.Topic: "out"}), false},
		{kerr.GroupAuthorizationFailed, false},
		{kerr.UnknownTopicOrPartition, false},
		{kerr.InvalidConfig, false},
		{errors.New("transform: boom"), false},
		{&os.PathError{Op: "mkdir", Path: "/state", Err: syscall.ENOTDIR}, false},
		{fmt.Errorf("store: %w", syscall.ENOSPC), false},
	} {
		require.Equal(t, tc.want, Transient(tc.err), "Transient(%v)", tc.err)
	}
}

func TestDropped(t *testing.T) {
	require.True(t, Dropped(fmt.Errorf("describing: %w", io.EOF)))
	require.True(t, Dropped(syscall.ECONNRESET))
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	require.False(t, Dropped(refused), "a refused dial is not a dropped connection")
	require.False(t, Dropped(context.DeadlineExceeded), "a silent broker is not a dropped connection")
	require.False(t, Dropped(kerr.TopicAuthorizationFailed))
}
