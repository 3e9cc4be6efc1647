package kafkatest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/admin"
)

// Cluster is a broker for one test.
type Cluster struct {
	Brokers []string
	// Real is true when the cluster came from KAFKA_BROKERS.
	Real bool
	// Secure is true when the cluster came from KAFKA_BROKERS together
	// with KAFKA_TLS_CA, KAFKA_SASL_USER and KAFKA_SASL_PASSWORD (see
	// Opts); Adm then acts as that super user.
	Secure bool
	Adm    *kadm.Client
	// fake is the embedded broker (nil on KAFKA_BROKERS).
	fake *kfake.Cluster
	cl   *kgo.Client
	tls  *tls.Config
	opts []kgo.Opt
}

// Kind names the broker kind for logs: "kafka" or "kfake".
func (c *Cluster) Kind() string {
	if c.Real {
		return "kafka"
	}
	return "kfake"
}

// New returns the test's cluster, closed when the test ends.
func New(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{}
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		c.Brokers = strings.Split(env, ",")
		c.Real = true
		if ca := os.Getenv(EnvTLSCA); ca != "" {
			tc, err := tlsConfig(ca)
			require.NoError(t, err)
			c.Secure, c.tls = true, tc
			c.opts = c.UserOpts(os.Getenv(EnvSASLUser), os.Getenv(EnvSASLPassword))
		}
	} else {
		fc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(fc.Close)
		c.Brokers = fc.ListenAddrs()
		c.fake = fc
	}
	cl, err := kgo.NewClient(c.clientOpts()...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c.cl = cl
	c.Adm = kadm.NewClient(cl)
	t.Logf("broker: %s %v", c.Kind(), c.Brokers)
	return c
}

// Fake returns a cluster on an embedded broker (kfake) whatever
// KAFKA_BROKERS says, and the broker itself, for tests that inject faults
// through its control hooks. Both are closed when the test ends.
func Fake(t testing.TB) (*Cluster, *kfake.Cluster) {
	t.Helper()
	fc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(fc.Close)
	c := &Cluster{Brokers: fc.ListenAddrs(), fake: fc}
	cl, err := kgo.NewClient(c.clientOpts()...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c.cl = cl
	c.Adm = kadm.NewClient(cl)
	return c, fc
}

var seq atomic.Int64

// Name returns a topic or application name unique to this test run.
func Name(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, seq.Add(1))
}

// CreateTopic creates a topic with partitions partitions. Its records are
// kept whatever their timestamps (retention.ms -1): tests write event
// times years in the past, which time-based retention would delete at
// its next check.
func (c *Cluster) CreateTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Adm.CreateTopic(ctx, partitions, -1, map[string]*string{"retention.ms": kadm.StringPtr("-1")}, name)
	require.NoError(t, err, "create topic %s", name)
	c.WaitTopic(t, name, partitions)
}

// WaitTopic waits until the broker's metadata lists topic with partitions
// partitions, each with a leader. On Apache Kafka, CreateTopics answers
// once the controller has the topic; a broker may serve metadata without
// it for a moment after that, and a runner started in that moment would
// rightly report the input topic missing.
func (c *Cluster) WaitTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	WaitFor(t, 30*time.Second, fmt.Sprintf("topic %s in the metadata with %d led partitions", topic, partitions), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		md, err := c.Adm.Metadata(ctx, topic)
		if err != nil {
			return false
		}
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil || int32(len(td.Partitions)) != partitions {
			return false
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
		return true
	})
}

// Produce writes recs (non-transactionally, idempotent) and waits for them.
func (c *Cluster) Produce(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(c.clientOpts(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))...)
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// ReadCommitted reads every committed record of topic (read_committed), up
// to the end offsets (last stable offsets) listed when it is called, while
// producers may still be writing.
func (c *Cluster) ReadCommitted(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := c.Adm.ListCommittedOffsets(ctx, topic)
	require.NoError(t, err)
	starts, err := c.Adm.ListStartOffsets(ctx, topic)
	require.NoError(t, err)
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		s, _ := starts.Lookup(topic, o.Partition)
		if o.Offset > s.Offset {
			want[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().At(s.Offset)
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(c.clientOpts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())...)
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s: still waiting for partitions %v", topic, want)
		fs.EachError(func(tp string, p int32, err error) { require.NoError(t, err, "fetch %s/%d", tp, p) })
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok {
				return
			}
			if r.Offset < end && !r.Attrs.IsControl() {
				out = append(out, r)
			}
			// A record at or past end-1 ends the partition. The last
			// records before end may be of an aborted transaction whose
			// marker lies past end, when end was the first offset of a
			// transaction still open: the reader drops them, and only a
			// record after end says it got there.
			if r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// CommittedOffsets returns the group's committed offsets of topic by
// partition (partitions without a commit are absent).
func (c *Cluster) CommittedOffsets(t testing.TB, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) || kerr.IsRetriable(err) {
		return map[int32]int64{} // no commit yet, or the coordinator is loading: callers poll
	}
	require.NoError(t, err)
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// EndOffsets returns the high watermarks of topic by partition.
func (c *Cluster) EndOffsets(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := c.Adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// FenceTasks fences the transactional IDs of the tasks (or extractor
// tokens) 0 to n-1 of app, as their next owner would: a commit under way
// completes and an open transaction aborts. A test that killed processes
// calls it, then WaitSettled, before it reads what they left.
func (c *Cluster) FenceTasks(t testing.TB, app string, n int32) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p, err := fencing.Init(ctx, fencing.TransactionalID(app, i), 10*time.Second, c.clientOpts()...)
		cancel()
		require.NoError(t, err, "fencing %s", fencing.TransactionalID(app, i))
		p.Close()
	}
}

// WaitSettled waits until no transaction is pending on any partition of
// topic: its last stable offset equals its end offset. EndTxn returns
// before the markers are written, so a read_committed read right after a
// commit may stop short of it.
func (c *Cluster) WaitSettled(t testing.TB, topic string) {
	t.Helper()
	WaitFor(t, 30*time.Second, "no transaction pending on "+topic, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stable, err := c.Adm.ListCommittedOffsets(ctx, topic)
		if err != nil || stable.Error() != nil {
			return false
		}
		ends := c.EndOffsets(t, topic)
		settled := true
		stable.Each(func(o kadm.ListedOffset) { settled = settled && o.Offset == ends[o.Partition] })
		return settled
	})
}

// WaitFor polls cond every 50ms until it holds or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	WaitForState(t, timeout, what, cond, nil)
}

// WaitForState is WaitFor that, when timeout passes, adds state() to the
// failure: what the test can tell about the system at that moment (the
// runners' states, the group, offsets, transactions), so that a wait that
// failed once says why. A nil state adds nothing.
func WaitForState(t testing.TB, timeout time.Duration, what string, cond func() bool, state func() string) {
	t.Helper()
	began := time.Now()
	deadline := began.Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			if state == nil {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %v waiting for %s; the state then:\n%s", timeout, what, state())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Goroutines returns the stacks of this process's goroutines whose stack
// mentions one of frames (e.g. "flechtwerk/runner."): where a stalled
// runner is waiting.
func Goroutines(frames ...string) string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var b strings.Builder
	kept := 0
	// The first stack is the caller's own.
	for _, g := range strings.Split(string(buf), "\n\n")[1:] {
		for _, f := range frames {
			if strings.Contains(g, f) {
				b.WriteString(g)
				b.WriteString("\n\n")
				kept++
				break
			}
		}
	}
	return fmt.Sprintf("%d goroutines with a frame of %v:\n%s", kept, frames, b.String())
}

// Keys returns the sorted distinct keys of recs.
func Keys(recs []*kgo.Record) []string {
	seen := map[string]bool{}
	for _, r := range recs {
		seen[string(r.Key)] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Shuffle returns a shuffled copy.
func Shuffle[T any](xs []T) []T {
	out := append([]T(nil), xs...)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Describe returns what describe APP prints for application app with
// input topics inputs (all its topics when empty): the group's members
// and their assignments, the tasks' owners, the committed offsets against
// the end offsets, the changelog and the transactions of the tasks'
// transactional IDs; or why it could not be described. For the state a
// test reports when a wait timed out (WaitForState).
func (c *Cluster) Describe(app string, inputs ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := admin.Describe(ctx, c.Adm, app, inputs)
	if err != nil {
		return fmt.Sprintf("describe %s: %v\n", app, err)
	}
	var b strings.Builder
	d.Print(&b)
	return b.String()
}

// Member is a consumer group member that only holds its place in group:
// it consumes topics, never fetches or commits, and gives its identity
// to commits made in its name (the runner's tasks carry their member's
// identity in TxnOffsetCommit).
type Member struct {
	cl *kgo.Client
}

// JoinGroup joins group as a member consuming topics and waits until it
// holds a generation. It leaves the group when the test ends, or at
// Leave.
func (c *Cluster) JoinGroup(t testing.TB, group string, topics ...string) *Member {
	t.Helper()
	opts := append(c.clientOpts(),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...),
		kgo.DisableAutoCommit(), kgo.SessionTimeout(6*time.Second))
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	m := &Member{cl: cl}
	t.Cleanup(m.Leave)
	// The join runs in the background once the client polls.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if cl.PollFetches(ctx).IsClientClosed() {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	WaitFor(t, 60*time.Second, "group "+group+" joined", func() bool {
		_, gen := m.Identity()
		return gen >= 0
	})
	return m
}

// Identity returns the member ID and generation (kgo's GroupMetadata).
func (m *Member) Identity() (memberID string, generation int32) { return m.cl.GroupMetadata() }

// Client returns the member's client.
func (m *Member) Client() *kgo.Client { return m.cl }

// Leave leaves the group and closes the client; a second call is a no-op.
func (m *Member) Leave() { m.cl.Close() }

// Dump describes every record of topic, control records and those of
// aborted transactions included, with its offset, producer id and epoch,
// and the partitions' start, stable and end offsets: what a failed read
// of the topic is read against.
func (c *Cluster) Dump(t testing.TB, topic string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	starts, _ := c.Adm.ListStartOffsets(ctx, topic)
	stable, _ := c.Adm.ListCommittedOffsets(ctx, topic)
	ends, err := c.Adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Sprintf("listing %s: %v", topic, err)
	}
	offsets := map[int32]kgo.Offset{}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, o.Partition)
		l, _ := stable.Lookup(topic, o.Partition)
		fmt.Fprintf(&b, "%s/%d: start %d (%v), stable %d (%v), end %d (%v)\n", topic, o.Partition, s.Offset, s.Err, l.Offset, l.Err, o.Offset, o.Err)
		if o.Err == nil && o.Offset > s.Offset {
			offsets[o.Partition] = kgo.NewOffset().At(s.Offset)
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return b.String()
	}
	cl, err := kgo.NewClient(c.clientOpts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords())...)
	if err != nil {
		return b.String() + err.Error()
	}
	defer cl.Close()
	for len(want) > 0 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(tp string, p int32, err error) { fmt.Fprintf(&b, "fetch %s/%d: %v\n", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			fmt.Fprintf(&b, "  %d@%d pid %d epoch %d control %t key %q value %q\n", r.Partition, r.Offset, r.ProducerID, r.ProducerEpoch, r.Attrs.IsControl(), r.Key, r.Value)
			if r.Offset >= want[r.Partition]-1 {
				delete(want, r.Partition)
			}
		})
	}
	return b.String()
}

// LogBuffer keeps what a logger writes (an slog handler's target), safe
// for concurrent writes.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
