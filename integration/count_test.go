package integration

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// TestStatefulCount runs a per-key counter over several partitions and
// checks outputs, committed offsets and the changelog exactly.
func TestStatefulCount(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions, n, keys = 4, 400, 20
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	c.Produce(t, inputs(in, n, keys, partitions)...)

	rn := start(t, c, counter(out), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(37))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	recs := readStable(t, c, out)
	require.Len(t, recs, n, "every input has exactly one output")
	seen := map[string]map[int]bool{}
	for _, r := range recs {
		v, err := strconv.Atoi(string(r.Value))
		require.NoError(t, err)
		if seen[string(r.Key)] == nil {
			seen[string(r.Key)] = map[int]bool{}
		}
		require.False(t, seen[string(r.Key)][v], "duplicate count %d for %s", v, r.Key)
		seen[string(r.Key)][v] = true
	}
	require.Len(t, seen, keys)
	for k, vs := range seen {
		for i := 1; i <= n/keys; i++ {
			require.True(t, vs[i], "key %s misses count %d", k, i)
		}
	}

	// The changelog's last value per key is the final count.
	final := map[string]string{}
	for _, r := range readStable(t, c, app+"-changelog") {
		final[string(r.Key)] = string(r.Value)
	}
	require.Len(t, final, keys)
	for i := range keys {
		require.Equal(t, strconv.Itoa(n/keys), final[fmt.Sprintf("k%d", i)])
	}
	// Changelog records of key kI sit on partition I % partitions: the
	// task's partition, not the key hash.
	for _, r := range readStable(t, c, app+"-changelog") {
		var k int
		_, err := fmt.Sscanf(string(r.Key), "k%d", &k)
		require.NoError(t, err)
		require.Equal(t, int32(k)%partitions, r.Partition, "changelog record of %s", r.Key)
	}
}
