package integration

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// trickle produces recs one at a time, every gap, so that they reach the
// runner in several polls.
func trickle(t *testing.T, c *kafkatest.Cluster, gap time.Duration, recs ...*kgo.Record) {
	t.Helper()
	for i, r := range recs {
		if i > 0 {
			time.Sleep(gap)
		}
		c.Produce(t, r)
	}
}

// processedAt records when echoCounter's transform ran each record.
type processedAt struct {
	mu sync.Mutex
	at []time.Time
	n  atomic.Int64
}

func (p *processedAt) hook(*transformer.Record) error {
	p.mu.Lock()
	p.at = append(p.at, time.Now())
	p.mu.Unlock()
	p.n.Add(1)
	return nil
}

func (p *processedAt) span(from int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at[len(p.at)-1].Sub(p.at[from])
}

// TestTransactionSpansPolls: with CommitInterval 5s, records of one key
// that arrive over about 500ms (more on a loaded broker), in several polls, join one transaction
// (the output partition holds their outputs and one commit marker), and
// each sees the state the previous one wrote (still only in the
// transaction's overlay, not in the store). A run in which a transaction
// aborted (a loaded machine can cost the member its session, and the
// replay reads the records in one poll) shows nothing about this: the
// scenario runs again, up to three times.
func TestTransactionSpansPolls(t *testing.T) {
	c := kafkatest.New(t)
	for attempt := 1; ; attempt++ {
		aborted := transactionSpansPolls(t, c)
		if aborted == 0 {
			return
		}
		require.Less(t, attempt, 3, "every run had an aborted transaction")
		t.Logf("run %d: %d aborted transactions, running again", attempt, aborted)
	}
}

// transactionSpansPolls runs the scenario of TestTransactionSpansPolls on
// fresh topics and returns the number of aborted transactions on the
// output after the first one, checking the rest only when it is 0.
func transactionSpansPolls(t *testing.T, c *kafkatest.Cluster) (aborted int) {
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	ins := values(in, 0, "v", 11, 1)
	p := &processedAt{}
	rn := start(t, c, echoCounter(out, p.hook), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.CommitInterval(5*time.Second))
	defer func() { require.NoError(t, rn.stop(t)) }()

	// A first record and its own transaction: the task is running.
	c.Produce(t, ins[0])
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	readStable(t, c, out) // its marker is written
	before := c.EndOffsets(t, out)[0]
	trickle(t, c, 50*time.Millisecond, ins[1:]...)
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)

	outs := readStable(t, c, out)
	requireExactlyOnce(t, ins, outs)
	commits, aborts := markers(t, c, out, before)
	if aborts > 0 {
		return aborts
	}
	require.Greater(t, p.span(1), 300*time.Millisecond, "the records were processed over several polls")
	// 10 outputs and the one marker of the one transaction that holds them.
	require.Equal(t, 1, commits, "one transaction for the records of several polls")
	require.Equal(t, before+10+1, c.EndOffsets(t, out)[0], "one transaction for the records of several polls")
	return 0
}

// TestChangelogDedupeSpansInterval: a key written by records of several
// polls within one commit interval gets one changelog record, its last
// value.
func TestChangelogDedupeSpansInterval(t *testing.T) {
	c := kafkatest.New(t)
	in, app := kafkatest.Name("in"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	rec := func(k, v string) *kgo.Record { return &kgo.Record{Topic: in, Key: []byte(k), Value: []byte(v)} }
	rn := start(t, c, setter(), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.CommitInterval(5*time.Second))
	trickle(t, c, 50*time.Millisecond,
		rec("a", "a1"), rec("b", "b1"), rec("a", "a2"), rec("a", "a3"), rec("b", "del"),
		rec("a", "a4"), rec("c", "c1"), rec("a", "a5"))
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	require.Equal(t, map[string][]changelogEntry{
		"a": {put("a5")},
		"b": {tombstone},
		"c": {put("c1")},
	}, changelogByKey(readStable(t, c, app+"-changelog")))
}

// TestGracefulStopMidInterval stops the runner while its transactions are
// open (an interval the test never reaches): Run commits everything
// processed, once; a second run continues from the committed state and
// offsets.
func TestGracefulStopMidInterval(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions = 3
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.CommitInterval(10 * time.Minute), runner.TransactionTimeout(14 * time.Minute),
		runner.MaxPollRecords(4)}
	var first []*kgo.Record
	for p := range int32(partitions) {
		first = append(first, values(in, p, fmt.Sprintf("a%d-", p), 10, 3)...)
	}
	for _, r := range first {
		r.Key = append([]byte{byte('0' + r.Partition)}, r.Key...)
	}
	c.Produce(t, first...)
	p := &processedAt{}
	rn := start(t, c, echoCounter(out, p.hook), opts...)
	kafkatest.WaitFor(t, 30*time.Second, "every record processed", func() bool { return p.n.Load() == int64(len(first)) })
	time.Sleep(200 * time.Millisecond)
	require.Empty(t, c.CommittedOffsets(t, app, in), "nothing committed within the interval")
	require.NoError(t, rn.stop(t))
	requireOffsets(t, c, app, in, map[int32]int64{0: 10, 1: 10, 2: 10})
	requireExactlyOnce(t, first, readStable(t, c, out))

	second := make([]*kgo.Record, len(first))
	for i, r := range first {
		second[i] = &kgo.Record{Topic: in, Partition: r.Partition, Key: r.Key, Value: append([]byte("b"), r.Value[1:]...)}
	}
	c.Produce(t, second...)
	rn = start(t, c, echoCounter(out, nil), append(opts, runner.CommitInterval(100*time.Millisecond))...)
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
}

// TestRevocationMidInterval: a second runner joins while the first one's
// transactions are open (a 20s interval): the revocation commits at once
// what the first processed for the tasks that move to the second, while
// the tasks that stay keep their open transactions (the rebalance is
// cooperative) and commit at the end of their interval; nothing is lost or
// duplicated, and the state continues on the new owner.
func TestRevocationMidInterval(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions = 4
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	opts := func(name string) []runner.TransformerOpt {
		return []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
			runner.StateDir(t.TempDir()), runner.CommitInterval(20 * time.Second), runner.MaxPollRecords(4),
			runner.WithConsumerOpts(kgo.ClientID(name))}
	}
	batch := func(prefix string) []*kgo.Record {
		var recs []*kgo.Record
		for p := range int32(partitions) {
			rs := values(in, p, fmt.Sprintf("%s%d-", prefix, p), 10, 2)
			for _, r := range rs {
				r.Key = append([]byte{byte('0' + p)}, r.Key...)
			}
			recs = append(recs, rs...)
		}
		return recs
	}
	first := batch("a")
	c.Produce(t, first...)
	p := &processedAt{}
	a := start(t, c, echoCounter(out, p.hook), opts("a")...)
	kafkatest.WaitFor(t, 30*time.Second, "every record processed", func() bool { return p.n.Load() == int64(len(first)) })
	time.Sleep(200 * time.Millisecond)
	require.Empty(t, c.CommittedOffsets(t, app, in), "nothing committed within the interval")

	pb := &processedAt{}
	b := start(t, c, echoCounter(out, pb.hook), opts("b")...)
	waitMembers(t, c, app, a, b)
	moved := clientTasks(t, c, app)["b"]
	require.Len(t, moved, 2, "b took half of the tasks")
	want := map[int32]int64{}
	for _, n := range moved {
		want[n] = 10
	}
	requireOffsets(t, c, app, in, want)
	// The tasks that stayed began their interval with the moved ones: had
	// the interval committed the moved ones, it would have committed
	// these too.
	require.Equal(t, want, c.CommittedOffsets(t, app, in), "the tasks that stayed keep their open transactions")
	requireOffsets(t, c, app, in, map[int32]int64{0: 10, 1: 10, 2: 10, 3: 10})
	requireExactlyOnce(t, first, readStable(t, c, out))

	second := batch("b")
	c.Produce(t, second...)
	// A stop commits what was processed, not what is still queued: wait
	// until both instances together processed the whole second batch.
	kafkatest.WaitFor(t, 30*time.Second, "the second batch processed", func() bool {
		return p.n.Load()-int64(len(first))+pb.n.Load() >= int64(len(second))
	})
	require.NoError(t, a.stop(t))
	require.NoError(t, b.stop(t))
	requireOffsets(t, c, app, in, map[int32]int64{0: 20, 1: 20, 2: 20, 3: 20})
	requireExactlyOnce(t, append(first, second...), readStable(t, c, out))
}
