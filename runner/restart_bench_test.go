package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/store"
)

// BenchmarkRestartAfterKill measures the restart of one runner process
// after a SIGKILL, with its state directory (warm) and without it (cold):
// the process runs one task whose store holds -standby-keys keys of 100
// bytes while a producer feeds it about 2000 records/s, so the kill lands
// inside a commit interval; then the same process is started again. It
// reports the task's restore (records replayed and its time, from the
// log) and the time from the new start to the first output it committed
// (read with read_committed), which includes the wait of the group for
// the killed member (up to its session timeout) before it assigns the
// task again. Set
// KAFKA_BROKERS for a real broker; nothing is asserted about time.
//
//	go test ./runner/ -run '^$' -bench BenchmarkRestartAfterKill -benchtime 1x
func BenchmarkRestartAfterKill(b *testing.B) {
	for _, warm := range []bool{true, false} {
		name := "cold"
		if warm {
			name = "warm"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				restartAfterKill(b, warm, *standbyKeys)
			}
		})
	}
}

func restartAfterKill(b *testing.B, warm bool, keys int) {
	c := kafkatest.New(b)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("restart")
	c.CreateTopic(b, in, 1)
	c.CreateTopic(b, out, 1)
	writeState(b, c, app, keys)
	dir := b.TempDir()
	a := spawnChild(b, c, dir, app, in, out, 0, "a")
	kafkatest.WaitFor(b, 5*time.Minute, "a runs the task", func() bool {
		return strings.Contains(a.logs(), `msg="task running" partition=0`)
	})
	stopFeed := feedTask(b, c, in)
	defer stopFeed()
	time.Sleep(3 * time.Second)

	require.NoError(b, a.cmd.Process.Signal(syscall.SIGKILL))
	_, _ = a.cmd.Process.Wait()
	if !warm {
		removed, err := store.Prune(filepath.Join(a.dir, app), 0)
		require.NoError(b, err)
		require.NotEmpty(b, removed, "the killed process left its store")
	}
	// The new process logs to a new file; every committed output from the
	// end offset now on is its own.
	require.NoError(b, os.Rename(a.log, a.log+".killed"))
	first := firstOutput(b, c, out, func([]byte) bool { return true })
	started := time.Now()
	again := spawnChild(b, c, dir, app, in, out, 0, "a")
	var at time.Time
	select {
	case at = <-first:
	case <-time.After(5 * time.Minute):
		b.Fatal("no output of the restarted process within 5 minutes")
	}
	took := at.Sub(started)
	rs := taskRestored(b, again.logs())
	require.Equal(b, !warm, rs.full, "a warm restart replays only the tail, a cold one the whole partition: %s", rs.line)
	b.ReportMetric(took.Seconds(), "s/restart")
	b.ReportMetric(float64(rs.records), "replayed")
	fmt.Printf("restart after SIGKILL bench (%s, %d keys of 100 bytes, warm %v): start to the first committed output %v (the group waits up to the %v session timeout for the killed member); its restore: %s\n",
		c.Kind(), keys, warm, took.Round(time.Millisecond), childSession, rs)
}
