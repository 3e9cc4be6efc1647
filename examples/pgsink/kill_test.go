package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/pgtest"
)

// TestKillAtLeastOnce SIGKILLs the sink process repeatedly, mid-write (in
// an open database transaction) and between a write and its offset commit.
// At each kill the group's committed offset has not run ahead of the rows
// in the table; after the restarts every input row is there.
func TestKillAtLeastOnce(t *testing.T) {
	pgURL := pgtest.URL(t)
	conn := pgtest.Connect(t)
	c := kafkatest.New(t)
	topic, app := kafkatest.Name("pgsink-in"), kafkatest.Name("pgsink-app")
	table := pgtest.Table("pgsink_kill")
	c.CreateTopic(t, topic, 3)
	const n = 3000
	var recs []*kgo.Record
	for i := range n {
		o := Order{ID: fmt.Sprintf("order-%05d", i), Customer: fmt.Sprintf("c%d", i%11), Amount: int64(i)}
		v, _ := json.Marshal(o)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 3), Key: []byte(o.ID), Value: v})
	}
	c.Produce(t, recs...)
	// Where each order landed: partition -> offset -> id.
	at := map[int32]map[int64]string{}
	for _, r := range c.ReadCommitted(t, topic) {
		if at[r.Partition] == nil {
			at[r.Partition] = map[int64]string{}
		}
		at[r.Partition][r.Offset] = string(r.Key)
	}
	ends := c.EndOffsets(t, topic)

	bin := filepath.Join(t.TempDir(), "pgsink")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "building the example: %s", out)
	ctx := context.Background()
	// A killed member holds its partitions until its session expires.
	session := "1s"
	if c.Real {
		session = "6s" // the broker's group.min.session.timeout.ms
	}

	start := func(extra ...string) (*exec.Cmd, <-chan string) {
		args := append([]string{"-brokers", strings.Join(c.Brokers, ","), "-pg-url", pgURL,
			"-app", app, "-topic", topic, "-table", table, "-trace", "-max-poll-records", "50", "-session-timeout", session}, extra...)
		cmd := exec.Command(bin, args...)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				select {
				case lines <- sc.Text():
				default: // nobody listens any more
				}
			}
		}()
		return cmd, lines
	}
	rows := func() map[string]bool {
		got := map[string]bool{}
		r, err := conn.Query(ctx, `SELECT id FROM `+pgx.Identifier{table}.Sanitize())
		if err != nil && strings.Contains(err.Error(), "does not exist") {
			return got
		}
		require.NoError(t, err)
		ids, err := pgx.CollectRows(r, pgx.RowTo[string])
		require.NoError(t, err)
		for _, id := range ids {
			got[id] = true
		}
		return got
	}
	// The committed offset never runs ahead of the rows written.
	check := func(round int) {
		com := c.CommittedOffsets(t, app, topic)
		got := rows()
		for p, off := range com {
			for o := int64(0); o < off; o++ {
				id, ok := at[p][o]
				require.True(t, ok, "partition %d offset %d was not produced", p, o)
				require.True(t, got[id], "round %d: partition %d committed %d but %s (offset %d) is not in the table", round, p, off, id, o)
			}
		}
		t.Logf("round %d: committed %v, %d rows", round, com, len(got))
	}

	for round := range 6 {
		midWrite := round%2 == 0
		var cmd *exec.Cmd
		var lines <-chan string
		if midWrite {
			cmd, lines = start("-write-delay", "40ms")
		} else {
			cmd, lines = start("-after-write-delay", "40ms")
		}
		// Let it write a few batches, then kill it.
		want := 2 + rand.IntN(4)
		timeout := time.After(20 * time.Second)
	wait:
		for seen := 0; seen < want; {
			select {
			case l, ok := <-lines:
				if !ok {
					break wait
				}
				if strings.HasPrefix(l, "wrote ") {
					seen++
				}
			case <-timeout:
				break wait
			}
		}
		if midWrite {
			// A new transaction opened right after the line: kill
			// inside it.
			time.Sleep(time.Duration(5+rand.IntN(25)) * time.Millisecond)
		}
		// else: the line is printed after the database commit and
		// before Write returns, so the offset is not committed yet.
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		check(round)
	}

	// A last run without delays writes the rest and commits the end.
	cmd, _ := start()
	kafkatest.WaitFor(t, 2*time.Minute, "every row written and the end committed", func() bool {
		com := c.CommittedOffsets(t, app, topic)
		for p, end := range ends {
			if com[p] != end {
				return false
			}
		}
		return true
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "a graceful stop exits 0")
	check(99)
	got := rows()
	require.Len(t, got, n)
	for i := range n {
		require.True(t, got[fmt.Sprintf("order-%05d", i)])
	}
}
