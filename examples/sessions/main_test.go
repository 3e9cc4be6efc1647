package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSessionsOnBroker runs the example on its embedded broker and checks
// what a read_committed reader sees: every session of the clicks it
// produced, each exactly once, closed by stream time (the noon probes).
// The probes' own sessions stay open: nothing passes their gap.
func TestSessionsOnBroker(t *testing.T) {
	got, err := run("", "sessions", "clicks", "user-sessions", 3, false)
	require.NoError(t, err)
	for i := range got {
		// Compare instants, not locations: JSON gives times back in UTC.
		got[i].Start, got[i].End = got[i].Start.UTC(), got[i].End.UTC()
	}
	want := []Summary{
		{User: "ana", Start: at(0), End: at(10), Clicks: 3, Pages: []string{"/", "/shoes", "/cart"}, Reason: "inactive"},
		{User: "ana", Start: at(55), End: at(60), Clicks: 2, Pages: []string{"/", "/socks"}, Reason: "inactive"},
		{User: "bo", Start: at(1), End: at(12), Clicks: 2, Pages: []string{"/", "/help"}, Reason: "inactive"},
		{User: "cy", Start: at(5), End: at(20), Clicks: 2, Pages: []string{"/", "/hats"}, Reason: "inactive"},
	}
	require.Equal(t, want, got)
}
