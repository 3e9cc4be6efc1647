package changelog_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/changelog"
)

func TestTopics(t *testing.T) {
	require.Equal(t, "app-changelog", changelog.Topic("app"))
	require.Equal(t, "app-counts-changelog", changelog.StoreTopic("app", "counts"))
	require.Equal(t, "app-timers-changelog", changelog.TimersTopic("app"))
	require.Equal(t, changelog.StoreTopic("app", changelog.TimersName), changelog.TimersTopic("app"))
}
