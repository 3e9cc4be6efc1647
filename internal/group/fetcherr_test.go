package group

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFetchErrorWording: kgo injects a lost group session as an error of
// topic "" partition 0; it must read as a lost session (TestLostGroupSession
// in integration provokes it on a broker), while real fetch errors keep
// their topic and partition.
func TestFetchErrorWording(t *testing.T) {
	lost := FetchError("", 0, &kgo.ErrGroupSession{Err: kerr.UnknownMemberID})
	require.ErrorContains(t, lost, "runner: lost the consumer group session")
	require.NotContains(t, lost.Error(), "fetching topic")
	require.ErrorIs(t, lost, kerr.UnknownMemberID)
	var gs *kgo.ErrGroupSession
	require.True(t, errors.As(lost, &gs))

	other := FetchError("in", 3, kerr.CorruptMessage)
	require.EqualError(t, other, "runner: fetching topic in partition 3: "+kerr.CorruptMessage.Error())
}
