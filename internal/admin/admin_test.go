package admin_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/admin"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"describe"},
		{"describe", "a", "b"},
		{"describe", "a", "--nope"},
		{"state"},
		{"state", "get", "app"},
		{"state", "get", "app", "zz", "--hex"},
		{"reset", "app", "--to", "yesterday"},
		{"reset", "app", "--brokers", " , "},
	} {
		t.Run("args="+strings.Join(args, "_"), func(t *testing.T) {
			var out, errOut strings.Builder
			code := admin.Run(context.Background(), args, admin.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "127.0.0.1:1" }})
			require.Equal(t, admin.ExitUsage, code, "stderr: %s", errOut.String())
			require.Contains(t, errOut.String(), "Usage:")
		})
	}
	var out strings.Builder
	require.Equal(t, admin.ExitOK, admin.Run(context.Background(), []string{"--help"}, admin.Env{Stdout: &out, Stderr: &out}))
	require.Contains(t, out.String(), "state get APP KEY")
}

func TestDescribeUnknownAppIsAnError(t *testing.T) {
	c := kafkatest.New(t)
	r := cli(t, c, "", "describe", kafkatest.Name("nosuchapp"))
	require.Equal(t, admin.ExitError, r.code)
	require.Contains(t, r.stderr, "no application")
}

// TestDescribeShowsTasksAndLag: a running app's member holds every task,
// lag is 0 after draining, and the changelog has the app's state.
func TestDescribeShowsTasksAndLag(t *testing.T) {
	c := kafkatest.New(t)
	in, out, id := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	produceKeyed(t, c, in, counts(60, 6)...)
	a := startApp(t, c, id, in, out)
	waitLag0(t, c, id, in, a)
	waitMembers(t, c, id, 1)
	waitTransactionsEnded(t, c, id, 2)

	r := cli(t, c, "", "describe", id, "--json")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var d admin.Description
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d))
	require.Equal(t, "Stable", d.Group.State)
	require.Len(t, d.Group.Members, 1)
	m := d.Group.Members[0]
	require.Equal(t, []int32{0, 1}, m.Tasks)
	require.Equal(t, map[string][]int32{in: {0, 1}}, m.Assigned)
	require.Equal(t, []string{in}, d.Inputs)
	require.Len(t, d.Tasks, 2)
	for n, tk := range d.Tasks {
		require.Equal(t, int32(n), tk.Task)
		require.Equal(t, id+"-"+strconv.Itoa(n), tk.TransactionalID)
		require.Equal(t, m.MemberID, tk.MemberID, "task %d held by the member", n)
	}
	require.Len(t, d.Lag, 2)
	var total int64
	for _, l := range d.Lag {
		require.NotNil(t, l.Committed, "%s/%d", l.Topic, l.Partition)
		require.Equal(t, l.End, *l.Committed, "%s/%d", l.Topic, l.Partition)
		require.Zero(t, l.Lag)
		total += l.End
	}
	require.Zero(t, d.TotalLag)
	require.Positive(t, total)
	require.True(t, d.Changelog.Exists)
	require.Len(t, d.Changelog.Partitions, 2)
	require.Positive(t, d.Changelog.Records)
	if c.Real {
		require.NotNil(t, d.Changelog.Bytes, "Kafka reports log dir sizes")
		require.Positive(t, *d.Changelog.Bytes)
	} else if d.Changelog.Bytes == nil {
		require.Contains(t, strings.Join(d.Notes, "\n"), "changelog bytes not available", "a missing size is explained")
	}
	require.Len(t, d.Transactions, 2)
	for _, tx := range d.Transactions {
		require.Empty(t, tx.Err, tx.TransactionalID)
		require.NotEqual(t, "Unknown", tx.State, "%s ran transactions", tx.TransactionalID)
		require.False(t, tx.Open, "%s is idle after draining", tx.TransactionalID)
	}

	h := cli(t, c, "", "describe", id)
	require.Equal(t, admin.ExitOK, h.code, h.stderr)
	require.Contains(t, h.stdout, "group state Stable, 1 member(s)")
	require.Contains(t, h.stdout, m.MemberID)
	require.Contains(t, h.stdout, id+"-1")
	require.Contains(t, h.stdout, "total lag 0")
	require.Contains(t, h.stdout, "Changelog "+id+"-changelog: 2 partition(s)")
}

// TestDescribeShowsOpenTransaction: a transaction left open on {APP}-0
// shows as open with its partitions and start time; reset warns of it.
func TestDescribeShowsOpenTransaction(t *testing.T) {
	c := kafkatest.New(t)
	in, out, id := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: in, Partition: 0, At: 0, LeaderEpoch: -1})
	os.Add(kadm.Offset{Topic: in, Partition: 1, At: 0, LeaderEpoch: -1})
	require.NoError(t, c.Adm.CommitAllOffsets(ctx, id, os))

	tx, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.TransactionalID(id+"-0"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.TransactionTimeout(60*time.Second))
	require.NoError(t, err)
	defer tx.Close()
	before := time.Now().Add(-time.Minute)
	require.NoError(t, tx.BeginTransaction())
	require.NoError(t, tx.ProduceSync(ctx, &kgo.Record{Topic: out, Partition: 1, Value: []byte("x")}).FirstErr())

	r := cli(t, c, "", "describe", id, "--json")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var d admin.Description
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d))
	require.Len(t, d.Transactions, 2)
	open := d.Transactions[0]
	require.Equal(t, id+"-0", open.TransactionalID)
	require.Equal(t, "Ongoing", open.State)
	require.True(t, open.Open)
	require.Equal(t, map[string][]int32{out: {1}}, open.Partitions)
	require.NotNil(t, open.Started)
	require.True(t, open.Started.After(before), "started %v", open.Started)
	require.Equal(t, "Unknown", d.Transactions[1].State, "task 1 never ran")
	require.False(t, d.Transactions[1].Open)

	p := cli(t, c, "", "reset", id, "--dry-run")
	require.Equal(t, admin.ExitOK, p.code, p.stderr)
	require.Contains(t, p.stdout, "warning: transactions still open")
	require.Contains(t, p.stdout, id+"-0")
	require.NoError(t, tx.EndTransaction(ctx, kgo.TryAbort))
}

// TestResetRefusesWhileRunningThenReprocesses: reset fails while the app
// has members and changes nothing; after the app stopped it asks, then
// resets to earliest; a restart reprocesses every input (outputs double,
// state kept so counts continue).
func TestResetRefusesWhileRunningThenReprocesses(t *testing.T) {
	c := kafkatest.New(t)
	in, out, id := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const n, keys = 40, 4
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	produceKeyed(t, c, in, counts(n, keys)...)
	a := startApp(t, c, id, in, out)
	waitLag0(t, c, id, in, a)
	waitMembers(t, c, id, 1)
	ends := c.EndOffsets(t, in)

	r := cli(t, c, "", "reset", id, "--yes")
	require.Equal(t, admin.ExitError, r.code)
	require.Contains(t, r.stderr, "group "+id+" has 1 active member(s)")
	require.Contains(t, r.stderr, "stop every instance")
	require.Equal(t, ends, c.CommittedOffsets(t, id, in), "a refused reset changes nothing")

	a.stop(t)
	waitMembers(t, c, id, 0)

	r = cli(t, c, "n\n", "reset", id, "--keep-state")
	require.Equal(t, admin.ExitError, r.code)
	require.Contains(t, r.stderr, "not confirmed: nothing changed")
	require.Contains(t, r.stdout, "Reset of application "+id)
	require.Equal(t, ends, c.CommittedOffsets(t, id, in), "an unconfirmed reset changes nothing")

	r = cli(t, c, "y\n", "reset", id)
	require.Equal(t, admin.ExitError, r.code)
	require.Contains(t, r.stderr, "replay records onto state that already counts them")
	require.Contains(t, r.stdout, "Refused: 40 record offset(s) move back")
	require.Equal(t, ends, c.CommittedOffsets(t, id, in), "a reset replaying onto kept state needs --keep-state")

	r = cli(t, c, "y\n", "reset", id, "--json", "--keep-state")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var plan admin.ResetPlan
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &plan))
	require.True(t, plan.Done)
	require.Len(t, plan.Offsets, 2)
	for _, o := range plan.Offsets {
		require.Equal(t, in, o.Topic)
		require.Equal(t, ends[o.Partition], *o.Current)
		require.Zero(t, o.New)
	}
	require.Equal(t, map[int32]int64{0: 0, 1: 0}, c.CommittedOffsets(t, id, in), "offsets reset to earliest")

	a = startApp(t, c, id, in, out)
	waitLag0(t, c, id, in, a)
	a.stop(t)
	recs := readAll(t, c, out)
	require.Len(t, recs, 2*n, "the restart reprocessed every input")
	c.WaitSettled(t, id+"-changelog") // state get reads up to the last stable offset
	r = cli(t, c, "", "state", "get", id, "k1")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, strconv.Itoa(2*n/keys)+"\n", r.stdout, "state was kept: counts continued")
}

// TestResetToLatestAndTimestamp: --to latest skips to the end offsets, a
// timestamp after every record goes to the end, one before every record to
// the start.
func TestResetToLatestAndTimestamp(t *testing.T) {
	c := kafkatest.New(t)
	in, id := kafkatest.Name("in"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	produceKeyed(t, c, in, counts(20, 4)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: in, Partition: 0, At: 1, LeaderEpoch: -1})
	require.NoError(t, c.Adm.CommitAllOffsets(ctx, id, os))
	ends := c.EndOffsets(t, in)

	r := cli(t, c, "", "reset", id, "--input", in, "--to", "latest", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, ends, c.CommittedOffsets(t, id, in))

	r = cli(t, c, "", "reset", id, "--to", time.Now().Add(-time.Hour).Format(time.RFC3339), "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, map[int32]int64{0: 0, 1: 0}, c.CommittedOffsets(t, id, in))

	r = cli(t, c, "", "reset", id, "--to", time.Now().Add(time.Hour).Format(time.RFC3339), "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, ends, c.CommittedOffsets(t, id, in))
}

// TestStateGetThenResetStateDeletesChangelog: state get returns the
// committed value of a key (raw and --json), a deleted key is absent; reset
// --state deletes the changelog.
func TestStateGetThenResetStateDeletesChangelog(t *testing.T) {
	c := kafkatest.New(t)
	in, out, id := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 3)
	c.CreateTopic(t, out, 3)
	kvs := counts(50, 5)
	kvs = append(kvs, [2]string{"gone", "1"}, [2]string{"gone", "2"}, [2]string{"gone", "del"})
	produceKeyed(t, c, in, kvs...)
	a := startApp(t, c, id, in, out)
	waitLag0(t, c, id, in, a)
	// state get reads up to the last stable offset: the offsets can be
	// visible before the changelog's markers of their transaction.
	c.WaitSettled(t, id+"-changelog")

	for _, k := range []string{"k0", "k3", "k4"} {
		r := cli(t, c, "", "state", "get", id, k)
		require.Equal(t, admin.ExitOK, r.code, r.stderr)
		require.Equal(t, "10\n", r.stdout, "count of %s", k)
	}
	r := cli(t, c, "", "state", "get", "--json", id, "k2")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var sv admin.StateValue
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sv))
	require.True(t, sv.Found)
	require.Equal(t, "hash", sv.PartitionFrom)
	require.Equal(t, json.RawMessage("10"), sv.Value)
	require.Equal(t, id+"-changelog", sv.Topic)

	r = cli(t, c, "", "state", "get", id, "gone")
	require.Equal(t, admin.ExitError, r.code, "a deleted key has no state")
	require.Contains(t, r.stderr, `key "gone" has no committed state in `+id+"-changelog partition")
	r = cli(t, c, "", "state", "get", id, "k2", "--partition", strconv.Itoa(int((sv.Partition+1)%3)))
	require.Equal(t, admin.ExitError, r.code, "k2 is not on another partition")
	require.Contains(t, r.stderr, "partition chosen by flag")
	r = cli(t, c, "", "state", "get", id, "k2", "--partition", strconv.Itoa(int(sv.Partition)))
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, "10\n", r.stdout)
	r = cli(t, c, "", "state", "get", id, "k2", "--partition", "3")
	require.Equal(t, admin.ExitError, r.code)
	require.Contains(t, r.stderr, "has 3 partitions")

	a.stop(t)
	waitMembers(t, c, id, 0)
	r = cli(t, c, "", "reset", id, "--state", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "Delete changelog topic "+id+"-changelog")
	require.Contains(t, r.stdout, "deleted topic "+id+"-changelog")
	kafkatest.WaitFor(t, 30*time.Second, "changelog deleted", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		td, err := c.Adm.ListTopics(ctx, id+"-changelog")
		require.NoError(t, err)
		d, exists := td[id+"-changelog"]
		return !exists || d.Err != nil
	})
	r = cli(t, c, "", "state", "get", id, "k0")
	require.Equal(t, admin.ExitError, r.code)
	require.Contains(t, r.stderr, "changelog topic "+id+"-changelog does not exist")
}

// TestResetStateAfterExpiredInputAndLostChangelog: an application whose
// input records were all deleted (retention) and whose changelog was
// deleted too refuses to start with CHANGELOG_MISSING (its committed
// offsets account for state that is gone and cannot be rebuilt) instead of
// counting on from empty state. reset --state, which finds no changelog
// to delete, marks the offsets it commits as a state reset: then the
// application starts, from empty state.
func TestResetStateAfterExpiredInputAndLostChangelog(t *testing.T) {
	c := kafkatest.New(t)
	in, out, id := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	produceKeyed(t, c, in, counts(6, 1)...)
	a := startApp(t, c, id, in, out)
	waitLag0(t, c, id, in, a)
	a.stop(t)
	waitMembers(t, c, id, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.Adm.DeleteTopic(ctx, id+"-changelog")
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	expire := kadm.Offsets{}
	expire.Add(kadm.Offset{Topic: in, Partition: 0, At: 6})
	deleted, err := c.Adm.DeleteRecords(ctx, expire)
	require.NoError(t, err)
	require.NoError(t, deleted.Error())
	kafkatest.WaitFor(t, 30*time.Second, "changelog deleted", func() bool {
		td, err := c.Adm.ListTopics(ctx, id+"-changelog")
		require.NoError(t, err)
		d, exists := td[id+"-changelog"]
		return !exists || d.Err != nil
	})

	a = startApp(t, c, id, in, out)
	select {
	case <-a.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the runner started although its state is gone")
	}
	require.ErrorIs(t, a.err, flechtwerk.ErrChangelogMissing)
	require.Contains(t, a.err.Error(), "flechtwerk reset "+id+" --state")
	waitMembers(t, c, id, 0)

	r := cli(t, c, "", "reset", id, "--state", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "State is reset")
	require.Contains(t, r.stdout, "changelog topic "+id+"-changelog does not exist")
	offs, err := c.Adm.FetchOffsets(ctx, id)
	require.NoError(t, err)
	o, ok := offs.Lookup(in, 0)
	require.True(t, ok)
	require.Equal(t, int64(6), o.At)
	require.Equal(t, changelog.ResetMarker, o.Metadata)

	a = startApp(t, c, id, in, out)
	produceKeyed(t, c, in, [2]string{"k0", "x"})
	waitLag0(t, c, id, in, a)
	a.stop(t)
	recs := readAll(t, c, out)
	require.Equal(t, "1", string(recs[len(recs)-1].Value), "counting from empty state")
}

// TestResetOffsetShiftDuration: --to-offset and --shift-by clamp to each
// partition's start and end; --shift-by needs a committed offset;
// --by-duration before every record goes to the start, and a duration
// reaching back to no record goes to the end.
func TestResetOffsetShiftDuration(t *testing.T) {
	c := kafkatest.New(t)
	in, id := kafkatest.Name("in"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	produceKeyed(t, c, in, counts(20, 4)...)
	ends := c.EndOffsets(t, in)
	require.Positive(t, ends[0])
	require.Positive(t, ends[1])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: in, Partition: 0, At: 1, LeaderEpoch: -1})
	require.NoError(t, c.Adm.CommitAllOffsets(ctx, id, os))

	r := cli(t, c, "", "reset", id, "--input", in, "--shift-by", "2", "--yes")
	require.Equal(t, admin.ExitError, r.code, "partition 1 has no committed offset to shift")
	require.Contains(t, r.stderr, "no committed offset to shift on "+in+"/1")

	r = cli(t, c, "", "reset", id, "--input", in, "--to-offset", "3", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, map[int32]int64{0: min(3, ends[0]), 1: min(3, ends[1])}, c.CommittedOffsets(t, id, in))

	r = cli(t, c, "", "reset", id, "--shift-by", "-2", "--json", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	var plan admin.ResetPlan
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &plan))
	require.Equal(t, "committed offset -2", plan.To)
	require.False(t, plan.Changelog)
	require.Equal(t, map[int32]int64{0: max(min(3, ends[0])-2, 0), 1: max(min(3, ends[1])-2, 0)}, c.CommittedOffsets(t, id, in))

	r = cli(t, c, "", "reset", id, "--shift-by", "1000", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "clamped")
	require.Equal(t, ends, c.CommittedOffsets(t, id, in), "shifted past the end: the end")

	r = cli(t, c, "", "reset", id, "--by-duration", "1h", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, map[int32]int64{0: 0, 1: 0}, c.CommittedOffsets(t, id, in), "every record is younger than an hour")

	time.Sleep(1100 * time.Millisecond)
	r = cli(t, c, "", "reset", id, "--by-duration", "1s", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, ends, c.CommittedOffsets(t, id, in), "no record in the last second: the end")
}

// TestEveryResetPathStarts: after reset --to latest --state the
// application starts with its old state directory and counts from empty
// state; moving offsets back onto the recreated state is refused unless
// --state; a reset without --state while the changelog is missing keeps
// the offsets marked as a state reset, so the application starts again
// and rebuilds its state from the replayed inputs.
func TestEveryResetPathStarts(t *testing.T) {
	c := kafkatest.New(t)
	in, out, id := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	dir := t.TempDir()
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	produceKeyed(t, c, in, counts(20, 2)...) // k0 and k1, 10 each
	a := startAppIn(t, c, id, in, out, dir)
	waitLag0(t, c, id, in, a)
	a.stop(t)
	waitMembers(t, c, id, 0)
	lastOf := func(key string) string {
		t.Helper()
		last := ""
		for _, r := range readAll(t, c, out) {
			if string(r.Key) == key {
				last = string(r.Value)
			}
		}
		return last
	}
	require.Equal(t, "10", lastOf("k0"))

	r := cli(t, c, "", "reset", id, "--to", "latest", "--state", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	a = startAppIn(t, c, id, in, out, dir)
	produceKeyed(t, c, in, [2]string{"k0", "x"})
	waitLag0(t, c, id, in, a)
	a.stop(t)
	waitMembers(t, c, id, 0)
	require.Equal(t, "1", lastOf("k0"), "counting from empty state")

	r = cli(t, c, "", "reset", id, "--to", "earliest", "--yes")
	require.Equal(t, admin.ExitError, r.code, "the changelog is back: replaying onto it needs a choice")
	require.Contains(t, r.stderr, "replay records onto state")

	r = cli(t, c, "", "reset", id, "--to", "latest", "--state", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	r = cli(t, c, "", "reset", id, "--to", "earliest", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "No state: changelog topic "+id+"-changelog does not exist")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := c.Adm.FetchOffsets(ctx, id)
	require.NoError(t, err)
	offs.Each(func(o kadm.OffsetResponse) {
		require.Zero(t, o.At)
		require.Equal(t, changelog.ResetMarker, o.Metadata, "still a state reset: %s/%d", o.Topic, o.Partition)
	})

	a = startAppIn(t, c, id, in, out, dir)
	waitLag0(t, c, id, in, a)
	a.stop(t)
	require.Equal(t, "11", lastOf("k0"), "state rebuilt from all 11 inputs of k0")
}

// TestResetKeepsStoreNames: a reset that keeps the state keeps the store
// names of the offsets it moves (so the next start still refuses a lost
// store changelog); a state reset replaces them with the reset marker.
func TestResetKeepsStoreNames(t *testing.T) {
	c := kafkatest.New(t)
	in, id := kafkatest.Name("in"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	produceKeyed(t, c, in, counts(20, 4)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := changelog.StoresMetadata([]string{"seen", changelog.TimersName})
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: in, Partition: 0, At: 3, LeaderEpoch: -1, Metadata: names})
	os.Add(kadm.Offset{Topic: in, Partition: 1, At: 2, LeaderEpoch: -1, Metadata: names})
	require.NoError(t, c.Adm.CommitAllOffsets(ctx, id, os))
	metadata := func() map[int32]string {
		offs, err := c.Adm.FetchOffsets(ctx, id)
		require.NoError(t, err)
		m := map[int32]string{}
		offs.Each(func(o kadm.OffsetResponse) { m[o.Partition] = o.Metadata })
		return m
	}

	r := cli(t, c, "", "reset", id, "--input", in, "--to", "latest", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, c.EndOffsets(t, in), c.CommittedOffsets(t, id, in))
	require.Equal(t, map[int32]string{0: names, 1: names}, metadata())

	r = cli(t, c, "", "reset", id, "--input", in, "--to", "earliest", "--state", "--yes")
	require.Equal(t, admin.ExitOK, r.code, r.stderr)
	require.Equal(t, map[int32]string{0: changelog.ResetMarker, 1: changelog.ResetMarker}, metadata())
}
