package changelog_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/restore"
	"github.com/flechtwerk/flechtwerk/store"
)

// TestRecordRoundTrip: a write's changelog record reads back as the same
// write, its stamp included (the header restore reads is the one Record
// writes); a tombstone carries no stamp, an empty value stays a put.
func TestRecordRoundTrip(t *testing.T) {
	require.Equal(t, changelog.StampHeader, restore.StampHeader)
	for _, w := range []store.Write{
		{Key: []byte("k"), Value: []byte("v"), Stamp: []byte{1, 0, 0, 0, 0, 0, 0, 0, 7}},
		{Key: []byte("k"), Value: []byte("v")},
		{Key: []byte("k"), Value: []byte{}},
		{Key: []byte("k"), Delete: true},
	} {
		r := changelog.Record("t-changelog", 3, w)
		require.Equal(t, "t-changelog", r.Topic)
		require.Equal(t, int32(3), r.Partition)
		require.Equal(t, w, restore.Write(r))
	}
	r := changelog.Record("t-changelog", 0, store.Write{Key: []byte("k"), Delete: true, Stamp: []byte{1}})
	require.Nil(t, r.Value)
	require.Empty(t, r.Headers, "a tombstone carries no stamp")
}
