package integration

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// running is a Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error // receives Run's result once
	exited chan struct{}
	err    error
}

// stop cancels Run and returns its result.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.exited:
		return r.err
	case <-time.After(60 * time.Second):
		t.Fatal("runner did not stop within 60s")
		return nil
	}
}

func logger(t testing.TB) *slog.Logger {
	if os.Getenv("FLECHTWERK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func start(t testing.TB, c *kafkatest.Cluster, proc runner.Stage, opts ...runner.TransformerOpt) *running {
	t.Helper()
	all := append([]runner.TransformerOpt{
		runner.SeedBrokers(c.Brokers...),
		runner.SessionTimeout(6 * time.Second),
		runner.WithLogger(logger(t)),
	}, opts...)
	r, err := runner.NewTransformer(proc, all...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{cancel: cancel, done: make(chan error, 1), exited: make(chan struct{})}
	go func() {
		rn.err = r.Run(ctx)
		close(rn.exited)
		rn.done <- rn.err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rn.exited:
		case <-time.After(60 * time.Second):
			t.Error("runner did not stop within 60s")
		}
	})
	return rn
}

// counter counts records per key and emits "key=count" to out.
func counter(out string) *transformer.Stage[int] {
	return transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send(out, rec.Key, []byte(strconv.Itoa(n)))
		return nil
	})
}

// inputs returns n records spread over keys k0..k(keys-1), each key pinned to
// partition (key index % partitions), values "0".."n-1".
func inputs(topic string, n, keys int, partitions int32) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range n {
		k := i % keys
		recs[i] = &kgo.Record{
			Topic: topic, Partition: int32(k) % partitions,
			Key: []byte(fmt.Sprintf("k%d", k)), Value: []byte(strconv.Itoa(i)),
		}
	}
	return recs
}

// waitCommitted waits until the group's committed offsets on topic equal
// its end offsets (consumer lag 0).
func waitCommitted(t testing.TB, c *kafkatest.Cluster, group, topic string, timeout time.Duration, done <-chan error) {
	t.Helper()
	ends := c.EndOffsets(t, topic)
	deadline := time.Now().Add(timeout)
	for {
		got := c.CommittedOffsets(t, group, topic)
		ok := true
		for p, end := range ends {
			if end > 0 && got[p] != end {
				ok = false
			}
		}
		if ok {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("runner ended while waiting for lag 0: %v (committed %v, ends %v)", err, got, ends)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag not 0 after %v: committed %v, ends %v", timeout, got, ends)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// txnClient returns a transactional producer with the given id that writes
// to the records' explicit partitions; it is closed when the test ends.
func txnClient(t testing.TB, c *kafkatest.Cluster, txnID string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(60*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// produce writes recs in cl's open transaction and waits for them.
func produce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// beginAndProduce opens a transaction, writes recs in it and returns the
// offset of the first.
func beginAndProduce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) int64 {
	t.Helper()
	require.NoError(t, cl.BeginTransaction())
	produce(t, cl, recs...)
	return recs[0].Offset
}

// endTxn ends cl's transaction.
func endTxn(t testing.TB, cl *kgo.Client, commit kgo.TransactionEndTry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.EndTransaction(ctx, commit))
}

// inTxn writes recs in one transaction and ends it with commit.
func inTxn(t testing.TB, cl *kgo.Client, commit kgo.TransactionEndTry, recs ...*kgo.Record) {
	t.Helper()
	beginAndProduce(t, cl, recs...)
	endTxn(t, cl, commit)
}

// waitEnd waits until partition p of topic has high watermark want: on
// real Kafka transaction markers are written after EndTxn returns.
func waitEnd(t testing.TB, c *kafkatest.Cluster, topic string, p int32, want int64) {
	t.Helper()
	kafkatest.WaitFor(t, 20*time.Second, fmt.Sprintf("end offset %d of %s/%d", want, topic, p), func() bool {
		return c.EndOffsets(t, topic)[p] == want
	})
}

// lastStable returns the last stable offset of partition p of topic.
func lastStable(t testing.TB, c *kafkatest.Cluster, topic string, p int32) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := c.Adm.ListCommittedOffsets(ctx, topic)
	require.NoError(t, err)
	o, ok := offs.Lookup(topic, p)
	require.True(t, ok)
	require.NoError(t, o.Err)
	return o.Offset
}

// contents returns everything in st.
func contents(t testing.TB, st *store.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, st.Range(func(k, v []byte) bool {
		out[string(k)] = string(v)
		return true
	}))
	return out
}

// echoCounter counts records per state key and emits "<input value>#<count>"
// to out under the input key. fail, when not nil, may fail a record.
func echoCounter(out string, fail func(*transformer.Record) error) *transformer.Stage[int] {
	return transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		if fail != nil {
			if err := fail(rec); err != nil {
				return err
			}
		}
		n++
		e.SetState(n)
		e.Send(out, rec.Key, []byte(fmt.Sprintf("%s#%d", rec.Value, n)))
		return nil
	})
}

// values returns n records of topic partition p with values prefix0..,
// keys spread over keys keys (prefix-independent: "k0".."k(keys-1)").
func values(topic string, p int32, prefix string, n, keys int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range n {
		recs[i] = &kgo.Record{Topic: topic, Partition: p,
			Key: []byte(fmt.Sprintf("k%d", i%keys)), Value: []byte(fmt.Sprintf("%s%d", prefix, i))}
	}
	return recs
}

// requireExactlyOnce checks the outputs of echoCounter against its inputs
// (produced, so their offsets are set, all of one partition per key): every
// input has exactly one output, and the count it carries is its position
// among the inputs of its key in offset order: no duplicate, no gap, and
// state that continued across whatever happened in between.
func requireExactlyOnce(t testing.TB, ins, outs []*kgo.Record) {
	t.Helper()
	want, got := echoOutputs(t, ins, outs)
	for v := range want {
		require.Contains(t, got, v, "no output for input %s", v)
	}
	require.Equal(t, want, got, "outputs carry their input's position per key")
	require.Len(t, outs, len(ins))
}

// requireAtMostOnce checks the outputs of echoCounter for a run that may
// not have processed every input: no input has two outputs, and each
// output carries its input's position per key.
func requireAtMostOnce(t testing.TB, ins, outs []*kgo.Record) {
	t.Helper()
	want, got := echoOutputs(t, ins, outs)
	for v, o := range got {
		require.Equal(t, want[v], o, "output of input %s", v)
	}
}

// echoOutputs returns the output value expected for each input value, and
// the output value got per input value (failing on a duplicate).
func echoOutputs(t testing.TB, ins, outs []*kgo.Record) (want, got map[string]string) {
	t.Helper()
	sorted := slices.Clone(ins)
	slices.SortStableFunc(sorted, func(a, b *kgo.Record) int {
		if a.Topic != b.Topic {
			return strings.Compare(a.Topic, b.Topic)
		}
		return cmp.Compare(a.Offset, b.Offset)
	})
	want = map[string]string{}
	perKey := map[string]int{}
	for _, r := range sorted {
		perKey[string(r.Key)]++
		want[string(r.Value)] = fmt.Sprintf("%s#%d", r.Value, perKey[string(r.Key)])
	}
	got = map[string]string{}
	for _, r := range outs {
		v, _, ok := strings.Cut(string(r.Value), "#")
		require.True(t, ok, "output %q is not value#count", r.Value)
		require.NotContains(t, got, v, "duplicate output for input %s: %s and %s", v, got[v], r.Value)
		got[v] = string(r.Value)
	}
	return want, got
}

// wait returns Run's result, failing the test if Run does not end in time.
func (r *running) wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case <-r.exited:
		return r.err
	case <-time.After(timeout):
		t.Fatalf("runner did not end within %v", timeout)
		return nil
	}
}

// valuesOf returns the values of recs as strings.
func valuesOf(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// readStable waits until no transaction is open on topic (last stable
// offset = high watermark on every partition) and reads it read_committed.
// On real Kafka the markers of a committed transaction are written after
// EndTxn returns (and may land on the group's offsets before the outputs),
// so reading at once can miss a committed transaction's records.
func readStable(t testing.TB, c *kafkatest.Cluster, topic string) []*kgo.Record {
	t.Helper()
	kafkatest.WaitFor(t, 30*time.Second, "no open transaction on "+topic, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lso, err := c.Adm.ListCommittedOffsets(ctx, topic)
		require.NoError(t, err)
		hwm, err := c.Adm.ListEndOffsets(ctx, topic)
		require.NoError(t, err)
		stable := true
		hwm.Each(func(o kadm.ListedOffset) {
			require.NoError(t, o.Err)
			if l, ok := lso.Lookup(topic, o.Partition); !ok || l.Err != nil || l.Offset != o.Offset {
				stable = false
			}
		})
		return stable
	})
	return c.ReadCommitted(t, topic)
}

// markers counts the transaction markers in partition 0 of topic from
// offset from to its end, read_uncommitted: those that commit and those
// that abort.
func markers(t testing.TB, c *kafkatest.Cluster, topic string, from int64) (commits, aborts int) {
	t.Helper()
	end := c.EndOffsets(t, topic)[0]
	if from >= end {
		return 0, 0
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for next := from; next < end; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s from offset %d to %d", topic, from, end)
		require.NoError(t, fs.Err())
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if !r.Attrs.IsControl() || r.Offset >= end {
				return
			}
			// A control record's key: version (int16), type (int16):
			// 0 aborts, 1 commits.
			require.Len(t, r.Key, 4, "control record at offset %d", r.Offset)
			switch binary.BigEndian.Uint16(r.Key[2:]) {
			case 0:
				aborts++
			case 1:
				commits++
			}
		})
	}
	return commits, aborts
}

// requireOffsets waits until the group's committed offsets of topic equal
// want (on real Kafka a transactional commit shows once its marker is
// written) and fails the test with the last seen offsets if they do not.
func requireOffsets(t testing.TB, c *kafkatest.Cluster, group, topic string, want map[int32]int64) {
	t.Helper()
	var got map[int32]int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = c.CommittedOffsets(t, group, topic)
		if maps.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, want, got, "committed offsets of group %s on %s", group, topic)
}

// settledEnd waits until partition p of topic has no transaction pending
// (its last stable offset reached its end: every marker written; EndTxn
// returns before the markers are) and returns that offset.
func settledEnd(t testing.TB, c *kafkatest.Cluster, topic string, p int32) int64 {
	t.Helper()
	var end int64
	kafkatest.WaitFor(t, 30*time.Second, fmt.Sprintf("no transaction pending on %s/%d", topic, p), func() bool {
		end = lastStable(t, c, topic, p)
		return end == c.EndOffsets(t, topic)[p]
	})
	return end
}

// stableOffsets waits until the group has no transactional offset commit
// pending on the broker (OffsetFetch with require_stable answers without
// UNSTABLE_OFFSET_COMMIT: the commit's marker on the offsets topic is
// written, which EndTxn does not wait for) and returns its committed
// offsets of topic by partition.
func stableOffsets(t testing.TB, c *kafkatest.Cluster, group, topic string) map[int32]int64 {
	t.Helper()
	var out map[int32]int64
	kafkatest.WaitFor(t, 30*time.Second, "no offset commit of group "+group+" pending", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := c.Adm.FetchOffsets(kadm.RequireStable(ctx), group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			out = map[int32]int64{}
			return true
		}
		if err != nil {
			return false
		}
		out = map[int32]int64{}
		stable := true
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Topic != topic {
				return
			}
			if o.Err != nil {
				stable = false
			} else if o.At >= 0 {
				out[o.Partition] = o.At
			}
		})
		return stable
	})
	return out
}
