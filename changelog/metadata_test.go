package changelog_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/changelog"
)

func TestStoresMetadataNamesItsStores(t *testing.T) {
	require.Empty(t, changelog.StoresMetadata(nil))
	m := changelog.StoresMetadata([]string{"seen", changelog.TimersName, "totals"})
	require.Equal(t, "flechtwerk:stores=seen,timers,totals", m)
	for _, n := range []string{"seen", "timers", "totals"} {
		require.True(t, changelog.NamesStore(m, n), n)
	}
	for _, n := range []string{"see", "total", "", "seen,timers"} {
		require.False(t, changelog.NamesStore(m, n), n)
	}
	require.False(t, changelog.NamesStore(changelog.ResetMarker, "seen"))
	require.False(t, changelog.NamesStore("", "seen"))
	require.True(t, changelog.HasStores(m))
	require.False(t, changelog.HasStores(changelog.ResetMarker))
	require.False(t, changelog.HasStores(""))

	// Beyond the names form's bound: hashed, still answering per name.
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("store-with-a-rather-long-name-%02d", i))
	}
	m = changelog.StoresMetadata(many)
	require.LessOrEqual(t, len(m), 4096)
	require.NotContains(t, m, "store-with")
	for _, n := range many {
		require.True(t, changelog.NamesStore(m, n), n)
	}
	require.False(t, changelog.NamesStore(m, "store-with-a-rather-long-name-40"))
	require.True(t, changelog.HasStores(m))
}
