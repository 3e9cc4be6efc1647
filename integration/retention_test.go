package integration

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/store"
)

// TestStoreRetention: Run deletes the application's stores that nobody
// used for longer than StoreRetention, keeps fresh ones and ones another
// opener holds, whatever their age, and keeps its own stores when it stops
// (for a warm restart). A negative retention deletes nothing.
func TestStoreRetention(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retention time.Duration
		deleted   bool
	}{
		{name: "1h", retention: time.Hour, deleted: true},
		{name: "keep forever", retention: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 2)
			c.CreateTopic(t, out, 2)
			dir := t.TempDir()

			// Stores 5 (old), 6 (fresh) and 7 (old, held by another
			// opener), left by earlier assignments.
			for _, p := range []int32{5, 6} {
				st, err := store.Open(context.Background(), store.Dir(dir, app, p), store.Options{})
				require.NoError(t, err)
				require.NoError(t, st.Close())
			}
			held, err := store.Open(context.Background(), store.Dir(dir, app, 7), store.Options{})
			require.NoError(t, err)
			defer held.Close()
			old := time.Now().Add(-2 * time.Hour)
			for _, p := range []int32{5, 7} {
				require.NoError(t, os.Chtimes(store.Dir(dir, app, p), old, old))
			}

			recs := append(values(in, 0, "p0-", 10, 2), values(in, 1, "p1-", 10, 2)...)
			for _, r := range recs {
				r.Key = fmt.Appendf(nil, "p%d-%s", r.Partition, r.Key)
			}
			c.Produce(t, recs...)
			rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
				runner.StateDir(dir), runner.StoreRetention(tc.retention))
			waitCommitted(t, c, app, in, 30*time.Second, rn.done)
			require.NoError(t, rn.stop(t))

			gone := func(p int32) bool {
				_, err := os.Stat(store.Dir(dir, app, p))
				if os.IsNotExist(err) {
					return true
				}
				require.NoError(t, err)
				return false
			}
			require.Equal(t, tc.deleted, gone(5), "old unused store")
			require.False(t, gone(6), "fresh store")
			require.False(t, gone(7), "old store held by another opener")
			for _, p := range []int32{0, 1} {
				require.False(t, gone(p), "the runner's own store %d after Run", p)
			}
			requireExactlyOnce(t, recs, readStable(t, c, out))
		})
	}
}
