package runner_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// counter emits "{value}#{n}" for the n-th record of its key and keeps n
// as the key's state. Each record takes a millisecond, so that a stream
// spans many transactions.
func counter(out string) *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		time.Sleep(time.Millisecond)
		n++
		e.SetState(n)
		e.Send(out, rec.Key, fmt.Appendf(nil, "%s#%d", rec.Value, n))
		return nil
	})
}

// requireCounted checks counter's outputs against its inputs: every input
// has exactly one output, carrying its position among the inputs of its
// state (partition and key) in offset order: no duplicate, no gap, state
// that continued across every re-initialization.
func requireCounted(t *testing.T, ins, outs []*kgo.Record) {
	t.Helper()
	sorted := slices.Clone(ins)
	slices.SortStableFunc(sorted, func(a, b *kgo.Record) int { return cmp.Compare(a.Offset, b.Offset) })
	want, perKey := map[string]string{}, map[string]int{}
	for _, r := range sorted {
		k := fmt.Sprintf("%d/%s", r.Partition, r.Key)
		perKey[k]++
		want[string(r.Value)] = fmt.Sprintf("%s#%d", r.Value, perKey[k])
	}
	got := map[string]string{}
	for _, r := range outs {
		v, _, ok := strings.Cut(string(r.Value), "#")
		require.True(t, ok, "output %q", r.Value)
		require.NotContains(t, got, v, "duplicate output for input %s: %q and %q", v, got[v], r.Value)
		got[v] = string(r.Value)
	}
	var wrong []string
	for v, w := range want {
		if got[v] != w {
			wrong = append(wrong, fmt.Sprintf("input %s: want %q, got %q", v, w, got[v]))
		}
	}
	slices.Sort(wrong)
	require.Empty(t, wrong[:min(len(wrong), 10)], "%d of %d inputs without their exact output", len(wrong), len(want))
	require.Len(t, outs, len(ins))
}

// fault refuses requests of one kind: after lets that many pass first, then
// times requests in a row get code (nil: the connection is dropped).
type fault struct {
	key kmsg.Key
	// task0 limits the fault to the requests of task 0's transactional
	// id, so that consecutive refusals outlive that client's retries.
	task0 bool
	after int
	times int // -1: every request from then on
	code  *kerr.Error
	// logStart, when set, is the log start offset a refused produce
	// answers with; only a produce to partitions that earlier produces of
	// the fault's requests wrote to is refused then (franz-go takes a log
	// start past its writes for a truncation only where it has written).
	logStart int64
	written  map[string]bool // topic/partition

	mu      sync.Mutex
	seen    int
	refused int
}

func (f *fault) refusedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refused
}

// install makes fc refuse f's requests (of application app).
func (f *fault) install(fc *kfake.Cluster, app string) {
	fc.ControlKey(f.key.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		if f.task0 && txnIDOf(kreq) != app+"-0" {
			return nil, nil, false
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.logStart > 0 && !f.wroteAll(kreq) {
			return nil, nil, false
		}
		f.seen++
		if f.seen <= f.after || (f.times >= 0 && f.refused >= f.times) {
			return nil, nil, false
		}
		f.refused++
		if f.code == nil {
			return nil, errors.New("fault: connection dropped"), true
		}
		resp := refusal(kreq, f.code.Code)
		if pr, ok := resp.(*kmsg.ProduceResponse); ok && f.logStart > 0 {
			for i := range pr.Topics {
				for j := range pr.Topics[i].Partitions {
					pr.Topics[i].Partitions[j].LogStartOffset = f.logStart
				}
			}
		}
		return resp, nil, true
	})
}

// wroteAll records the partitions of produce request kreq and reports
// whether earlier requests had every one of them; the caller holds f.mu.
func (f *fault) wroteAll(kreq kmsg.Request) bool {
	req, ok := kreq.(*kmsg.ProduceRequest)
	if !ok {
		return true
	}
	if f.written == nil {
		f.written = map[string]bool{}
	}
	all := true
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			tp := fmt.Sprintf("%s/%x/%d", rt.Topic, rt.TopicID, rp.Partition)
			all = all && f.written[tp]
			f.written[tp] = true
		}
	}
	return all
}

// txnIDOf returns the transactional id of a transaction request.
func txnIDOf(kreq kmsg.Request) string {
	switch req := kreq.(type) {
	case *kmsg.EndTxnRequest:
		return req.TransactionalID
	case *kmsg.AddOffsetsToTxnRequest:
		return req.TransactionalID
	case *kmsg.TxnOffsetCommitRequest:
		return req.TransactionalID
	case *kmsg.InitProducerIDRequest:
		if req.TransactionalID != nil {
			return *req.TransactionalID
		}
	case *kmsg.ProduceRequest:
		if req.TransactionID != nil {
			return *req.TransactionID
		}
	}
	return ""
}

// refusal answers kreq with code everywhere it has an error code.
func refusal(kreq kmsg.Request, code int16) kmsg.Response {
	switch req := kreq.(type) {
	case *kmsg.EndTxnRequest:
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.Version, resp.ErrorCode = req.Version, code
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		return resp
	case *kmsg.AddOffsetsToTxnRequest:
		resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		resp.Version, resp.ErrorCode = req.Version, code
		return resp
	case *kmsg.InitProducerIDRequest:
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.Version, resp.ErrorCode = req.Version, code
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		return resp
	case *kmsg.DescribeConfigsRequest:
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		resp.Version = req.Version
		for _, rr := range req.Resources {
			r := kmsg.NewDescribeConfigsResponseResource()
			r.ResourceType, r.ResourceName, r.ErrorCode = rr.ResourceType, rr.ResourceName, code
			resp.Resources = append(resp.Resources, r)
		}
		return resp
	case *kmsg.HeartbeatRequest:
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.Version, resp.ErrorCode = req.Version, code
		return resp
	case *kmsg.TxnOffsetCommitRequest:
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			t := kmsg.NewTxnOffsetCommitResponseTopic()
			t.Topic, t.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				p := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				p.Partition, p.ErrorCode = rp.Partition, code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp
	case *kmsg.ProduceRequest:
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			t := kmsg.NewProduceResponseTopic()
			t.Topic, t.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				p := kmsg.NewProduceResponseTopicPartition()
				p.Partition, p.ErrorCode = rp.Partition, code
				p.BaseOffset, p.LogAppendTime, p.LogStartOffset = -1, -1, -1
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp
	}
	panic(fmt.Sprintf("fault: no refusal for %T", kreq))
}

// faultRun starts a stateful counter over in (2 partitions) with small
// transactions and few client retries, so that an injected fault outlives
// the client's own retries.
func faultRun(t *testing.T, c *kafkatest.Cluster, app, in, out string, opts ...runner.TransformerOpt) (*runner.Runner, context.CancelFunc, chan error) {
	t.Helper()
	all := append([]runner.TransformerOpt{
		runner.SeedBrokers(c.Brokers...),
		runner.ApplicationID(app),
		runner.InputTopics(in),
		runner.StateDir(t.TempDir()),
		runner.MaxPollRecords(40),
		runner.CommitInterval(20 * time.Millisecond),
		runner.SessionTimeout(3 * time.Second),
		runner.WithKafkaOpts(kgo.RequestRetries(2), kgo.RetryTimeout(3*time.Second)),
		runner.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}, opts...)
	r, err := runner.NewTransformer(counter(out), all...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("Run did not return 60s after cancel")
		}
	})
	return r, cancel, done
}

// faultTopics starts an embedded broker for fault injection and creates an
// input and an output topic of two partitions each, named for app.
func faultTopics(t *testing.T) (c *kafkatest.Cluster, fc *kfake.Cluster, in, out, app string) {
	t.Helper()
	c, fc = kafkatest.Fake(t)
	in, out, app = kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	return c, fc, in, out, app
}

// waitAllCommitted waits until group app committed the end offsets of
// both partitions of in, failing the test if Run (done) ends first.
func waitAllCommitted(t *testing.T, c *kafkatest.Cluster, app, in string, done chan error, timeout time.Duration) {
	t.Helper()
	ends := c.EndOffsets(t, in)
	kafkatest.WaitFor(t, timeout, "every input committed", func() bool {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("Run ended: %v", err)
		default:
		}
		got := c.CommittedOffsets(t, app, in)
		return got[0] == ends[0] && got[1] == ends[1]
	})
}

// faultInputs returns n records of in, values v{from}.., keys k0..k{keys-1},
// alternating over partitions 0 and 1.
// testWriter writes a runner's log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func faultInputs(in string, from, n, keys int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for j := range n {
		i := from + j
		recs[j] = &kgo.Record{Topic: in, Partition: int32(i % 2), Key: fmt.Appendf(nil, "k%d", i%keys), Value: fmt.Appendf(nil, "v%d", i)}
	}
	return recs
}

// TestTransientFaultsRiddenOut injects, while a runner processes a stream,
// transient errors of the kinds a restarting or re-elected broker gives
// into the requests of the tasks' transactions and of the group member. Run
// does not end; a fault that outlives the client's and the transaction's
// own retries re-initializes the task (counted in Stats.TaskRestarts); and a
// read_committed reader sees every output exactly once, each carrying the
// exact count of its key.
func TestTransientFaultsRiddenOut(t *testing.T) {
	// The causes one of which a case's restart must be logged with, where
	// another restart would hide a missing one. Below the log start: the
	// check of the producer's epoch, or, when franz-go's re-initialization
	// stalled the retried batch until BatchTimeout (seen on kfake in about
	// one run of 30), the flush's deadline; then nothing of the transaction
	// could commit either.
	causes := map[string][]string{
		"Produce_OUT_OF_ORDER_SEQUENCE_NUMBER_below_log_start": {
			txn.ErrProducerReinitialized.Error(),
			"flushing the transaction's records: " + context.DeadlineExceeded.Error(),
		},
	}
	for _, tc := range []struct {
		name    string
		f       *fault
		restart bool // the fault must re-initialize a task
	}{
		{"EndTxn_COORDINATOR_NOT_AVAILABLE", &fault{task0: true, key: kmsg.EndTxn, after: 3, times: 4, code: kerr.CoordinatorNotAvailable}, true},
		{"EndTxn_NOT_COORDINATOR", &fault{task0: true, key: kmsg.EndTxn, after: 3, times: 4, code: kerr.NotCoordinator}, true},
		{"EndTxn_REQUEST_TIMED_OUT", &fault{task0: true, key: kmsg.EndTxn, after: 3, times: 4, code: kerr.RequestTimedOut}, true},
		{"EndTxn_CONCURRENT_TRANSACTIONS", &fault{key: kmsg.EndTxn, after: 3, times: 2, code: kerr.ConcurrentTransactions}, false},
		{"EndTxn_connection_dropped", &fault{key: kmsg.EndTxn, after: 3, times: 1}, false},
		{"TxnOffsetCommit_REBALANCE_IN_PROGRESS", &fault{key: kmsg.TxnOffsetCommit, after: 3, times: 1, code: kerr.RebalanceInProgress}, true},
		{"TxnOffsetCommit_ILLEGAL_GENERATION", &fault{key: kmsg.TxnOffsetCommit, after: 3, times: 1, code: kerr.IllegalGeneration}, true},
		{"TxnOffsetCommit_UNKNOWN_MEMBER_ID", &fault{key: kmsg.TxnOffsetCommit, after: 3, times: 1, code: kerr.UnknownMemberID}, true},
		{"AddOffsetsToTxn_COORDINATOR_NOT_AVAILABLE", &fault{key: kmsg.AddOffsetsToTxn, after: 3, times: 5, code: kerr.CoordinatorNotAvailable}, false},
		{"AddOffsetsToTxn_connection_dropped", &fault{key: kmsg.AddOffsetsToTxn, after: 3, times: 2}, false},
		{"Produce_NOT_LEADER_OR_FOLLOWER", &fault{key: kmsg.Produce, after: 3, times: 3, code: kerr.NotLeaderForPartition}, false},
		{"Produce_connection_dropped", &fault{key: kmsg.Produce, after: 3, times: 2}, false},
		// A batch behind one the broker refused, both in flight, is
		// refused OUT_OF_ORDER_SEQUENCE_NUMBER; franz-go then fails the
		// transactional producer's ID. The transaction is aborted and the
		// task re-initialized, as in Kafka Streams, instead of Run ending.
		{"Produce_OUT_OF_ORDER_SEQUENCE_NUMBER", &fault{task0: true, key: kmsg.Produce, after: 3, times: 1, code: kerr.OutOfOrderSequenceNumber}, true},
		// The same refusal with a log start offset past what the producer
		// wrote there: franz-go then re-initializes the producer ID in the
		// middle of the transaction and retries the batch under the new
		// epoch; the InitProducerId aborted what the transaction had
		// written before. The transaction must not commit.
		{"Produce_OUT_OF_ORDER_SEQUENCE_NUMBER_below_log_start", &fault{task0: true, key: kmsg.Produce, after: 6, times: 1, code: kerr.OutOfOrderSequenceNumber, logStart: 1 << 40}, true},
		{"InitProducerID_after_EndTxn_fault", nil, true},
		{"Heartbeat_UNKNOWN_MEMBER_ID", &fault{key: kmsg.Heartbeat, after: 0, times: 1, code: kerr.UnknownMemberID}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fc, in, out, app := faultTopics(t)
			ins := faultInputs(in, 0, 1200, 7)
			c.Produce(t, ins...)

			faults := []*fault{tc.f}
			if tc.f == nil {
				// The re-initialization's own fence meets a coordinator
				// that is not available yet, and is retried.
				faults = []*fault{
					{task0: true, key: kmsg.EndTxn, after: 3, times: 4, code: kerr.CoordinatorNotAvailable},
					{task0: true, key: kmsg.InitProducerID, after: 1, times: 3, code: kerr.CoordinatorNotAvailable},
				}
			}
			for _, f := range faults {
				f.install(fc, app)
			}
			logs := &logCapture{w: testWriter{t}}
			r, _, done := faultRun(t, c, app, in, out,
				runner.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
			alive := func() {
				select {
				case err := <-done:
					done <- err // for the cleanup
					t.Fatalf("Run ended: %v", err)
				default:
				}
			}
			kafkatest.WaitFor(t, 90*time.Second, "the faults injected", func() bool {
				alive()
				for _, f := range faults {
					if f.refusedCount() == 0 {
						return false
					}
				}
				return true
			})
			// More input after the faults: processed by the recovered
			// tasks (or the rejoined member).
			more := faultInputs(in, 1200, 600, 7)
			c.Produce(t, more...)
			ins = append(ins, more...)
			waitAllCommitted(t, c, app, in, done, 90*time.Second)
			for _, f := range faults {
				require.Positive(t, f.refusedCount(), "the fault on %v was injected", f.key)
			}
			restarts := r.Stats().TaskRestarts
			t.Logf("%s: refused %d, task restarts %d", tc.name, faults[0].refusedCount(), restarts)
			if tc.restart {
				require.Positive(t, restarts, "the task was re-initialized")
			}
			if want := causes[tc.name]; want != nil {
				logged := logs.String()
				require.True(t, slices.ContainsFunc(want, func(c string) bool { return strings.Contains(logged, c) }),
					"a restart's cause is one of %q; the log:\n%s", want, logged)
			}
			requireCounted(t, ins, c.ReadCommitted(t, out))
			require.NoError(t, r.Healthy(), "Run is still running")
		})
	}
}

// logCapture writes a runner's log lines to w and keeps them.
type logCapture struct {
	w  io.Writer
	mu sync.Mutex
	b  strings.Builder
}

func (l *logCapture) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	return l.w.Write(p)
}

func (l *logCapture) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPersistentFaultEndsRun: a transaction coordinator that never becomes
// available again re-initializes the task until TaskTimeout passed; then
// Run ends with a *TaskTimeoutError that names the task and the broker's
// error, and nothing of the run is visible.
func TestPersistentFaultEndsRun(t *testing.T) {
	c, fc, in, out, app := faultTopics(t)
	c.Produce(t, faultInputs(in, 0, 200, 5)...)
	f := &fault{key: kmsg.EndTxn, times: -1, code: kerr.CoordinatorNotAvailable}
	f.install(fc, app)

	r, _, done := faultRun(t, c, app, in, out, runner.TaskTimeout(2*time.Second))
	var err error
	select {
	case err = <-done:
		done <- err // for the cleanup
	case <-time.After(90 * time.Second):
		t.Fatal("Run did not end under a persistent fault")
	}
	t.Logf("Run: %v", err)
	require.ErrorIs(t, err, flechtwerk.ErrTaskTimeout)
	require.ErrorIs(t, err, kerr.CoordinatorNotAvailable)
	var te *runner.TaskTimeoutError
	require.ErrorAs(t, err, &te)
	require.GreaterOrEqual(t, te.Partition, int32(0))
	require.Contains(t, err.Error(), fmt.Sprintf("task %d kept failing", te.Partition))
	require.Positive(t, r.Stats().TaskRestarts)
	require.Empty(t, c.ReadCommitted(t, out), "nothing of the run is visible")
	require.Empty(t, c.CommittedOffsets(t, app, in), "no offset committed")
}

// TestStartupRidesOutTransientErrors: once the cluster answered, a startup
// step that meets a transient error (here the check of an existing
// changelog's configs, answered REQUEST_TIMED_OUT twice) is retried; Run
// starts and processes every input exactly once.
func TestStartupRidesOutTransientErrors(t *testing.T) {
	c, fc, in, out, app := faultTopics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Adm.CreateTopic(ctx, 2, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, changelog.Topic(app))
	require.NoError(t, err)
	ins := faultInputs(in, 0, 300, 5)
	c.Produce(t, ins...)
	f := &fault{key: kmsg.DescribeConfigs, times: 2, code: kerr.RequestTimedOut}
	f.install(fc, app)

	_, _, done := faultRun(t, c, app, in, out)
	waitAllCommitted(t, c, app, in, done, 90*time.Second)
	require.Equal(t, 2, f.refusedCount())
	requireCounted(t, ins, c.ReadCommitted(t, out))
}

// TestGracefulStopAfterTransientCommitFailure stops Run while both tasks'
// transactions are open (a 20s interval) and task 0's final EndTxn keeps
// meeting COORDINATOR_NOT_AVAILABLE: Run still returns nil, having logged
// the failed commit; nothing of task 0's transaction is visible and its
// offset did not move, task 1 committed as usual, and a restart processes
// task 0's records exactly once, with the state of each key exact.
func TestGracefulStopAfterTransientCommitFailure(t *testing.T) {
	c, fc, in, out, app := faultTopics(t)
	ins := faultInputs(in, 0, 200, 7)
	c.Produce(t, ins...)
	ends := c.EndOffsets(t, in)

	logs := &logCapture{w: testWriter{t}}
	_, cancel, done := faultRun(t, c, app, in, out,
		runner.CommitInterval(20*time.Second), runner.TransactionTimeout(time.Minute),
		runner.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	kafkatest.WaitFor(t, 60*time.Second, "every output written inside the open transactions", func() bool {
		e := c.EndOffsets(t, out)
		return e[0]+e[1] >= int64(len(ins))
	})
	require.Empty(t, c.ReadCommitted(t, out), "the transactions are still open")

	f := &fault{task0: true, key: kmsg.EndTxn, times: -1, code: kerr.CoordinatorNotAvailable}
	f.install(fc, app)
	cancel()
	select {
	case err := <-done:
		done <- err // for the cleanup
		require.NoError(t, err, "a graceful stop whose final commit failed transiently")
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return 60s after cancel")
	}
	require.Positive(t, f.refusedCount(), "task 0's EndTxn was refused")
	require.Contains(t, logs.String(), "task's last commit before Run's stop failed")

	outs := c.ReadCommitted(t, out)
	for _, r := range outs {
		var i int
		_, err := fmt.Sscanf(string(r.Value), "v%d#", &i)
		require.NoError(t, err, "output %q", r.Value)
		require.Equal(t, 1, i%2, "output %q of task 0's failed transaction is visible", r.Value)
	}
	require.Len(t, outs, len(ins)/2, "task 1's outputs")
	got := c.CommittedOffsets(t, app, in)
	require.Zero(t, got[0], "task 0's offset did not move")
	require.Equal(t, ends[1], got[1], "task 1's offset")

	f.mu.Lock()
	f.times = f.refused // no more refusals
	f.mu.Unlock()
	_, _, done = faultRun(t, c, app, in, out)
	waitAllCommitted(t, c, app, in, done, 60*time.Second)
	requireCounted(t, ins, c.ReadCommitted(t, out))
}
