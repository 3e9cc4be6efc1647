package integration

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/store"
)

// TestRestartWithEmptyStateDir stops a stateful runner and starts it again
// on a new, empty state directory: the state is rebuilt from the changelog
// alone, and the counts continue where they stopped, with no gap and no
// duplicate.
func TestRestartWithEmptyStateDir(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions, keys = 3, 9
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)

	produce := func(prefix string, n int) []*kgo.Record {
		var recs []*kgo.Record
		for p := range int32(partitions) {
			rs := values(in, p, fmt.Sprintf("%s%d-", prefix, p), n, keys)
			for _, r := range rs {
				// keys of partition p: p{p}-k0..p{p}-k8
				r.Key = fmt.Appendf(nil, "p%d-%s", p, r.Key)
			}
			recs = append(recs, rs...)
		}
		c.Produce(t, recs...)
		return recs
	}

	first := produce("a", 30)
	dir1 := t.TempDir()
	rn := start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(dir1), runner.MaxPollRecords(16))
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	second := produce("b", 30)
	dir2 := t.TempDir()
	rn = start(t, c, echoCounter(out, nil), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(dir2), runner.MaxPollRecords(16))
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
	// The second run kept its stores in the new directory only.
	for p := range int32(partitions) {
		_, err := os.Stat(store.Dir(dir2, app, p))
		require.NoError(t, err, "store of task %d in the new state dir", p)
	}
}
