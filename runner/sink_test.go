package runner_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/sink"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// memSink records what it was asked to write.
type memSink struct {
	mu      sync.Mutex
	written []sink.Record[[]byte]
	hook    func(ctx context.Context, batch []sink.Record[[]byte]) error
}

func (m *memSink) Write(ctx context.Context, batch []sink.Record[[]byte]) error {
	if m.hook != nil {
		if err := m.hook(ctx, batch); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.written = append(m.written, batch...)
	return nil
}

func (m *memSink) values() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, r := range m.written {
		out = append(out, string(r.Value))
	}
	return out
}

func startSink(t *testing.T, st runner.Stage, opts ...runner.SinkOpt) (stop func() error) {
	t.Helper()
	r, err := runner.NewSink(st, opts...)
	require.NoError(t, err)
	return startRunner(t, r)
}

// TestSinkDeliveryConfig: a sink must declare its mode, and settings that
// contradict it are coded startup errors.
func TestSinkDeliveryConfig(t *testing.T) {
	base := []runner.SinkOpt{runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"), runner.InputTopics("in")}
	var m memSink
	codec := sink.ValueCodec(transformer.Bytes())

	_, err := runner.NewSink(sink.New[[]byte](&m, codec), base...)
	require.ErrorIs(t, err, flechtwerk.ErrNoDelivery)

	_, err = runner.NewSink(sink.New[[]byte](&m, codec, sink.Delivery(sink.AtLeastOnce)),
		append(base, runner.AutoCommitInterval(time.Second))...)
	require.ErrorIs(t, err, flechtwerk.ErrDeliveryConflict)
	require.ErrorContains(t, err, "AutoCommitInterval")

	_, err = runner.NewSink(sink.New[[]byte](&m, codec, sink.Delivery(sink.AtMostOnce)),
		append(base, runner.CommitKeepalive(time.Minute))...)
	require.ErrorIs(t, err, flechtwerk.ErrDeliveryConflict)
	require.ErrorContains(t, err, "CommitKeepalive")

	_, err = runner.NewSink(sink.New[[]byte](&m, codec, sink.Delivery(sink.AtMostOnce)),
		append(base, runner.SinkRetry(runner.RetryPolicy{Transient: func(error) bool { return true }, MaxAttempts: 3}))...)
	require.ErrorIs(t, err, flechtwerk.ErrDeliveryConflict)
	require.ErrorContains(t, err, "SinkRetry")

	_, err = runner.NewSink(sink.New[[]byte](&m, codec, sink.Delivery(sink.Mode(7))), base...)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)

	_, err = runner.NewSink(sink.New[[]byte](&m, sink.ValueCodec(transformer.JSON[int]()), sink.Delivery(sink.AtLeastOnce)), base...)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)

	_, err = runner.NewSink(sink.New[[]byte](&m, codec, sink.Delivery(sink.AtLeastOnce)),
		append(base, runner.MaxPollRecords(10), runner.CommitKeepalive(time.Minute))...)
	require.NoError(t, err)
}

func produceN(t *testing.T, c *kafkatest.Cluster, topic string, partition int32, from, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Value: []byte(fmt.Sprint(i))})
	}
	c.Produce(t, recs...)
}

// TestSinkAtLeastOnceFanOut: with fan-out 0, 1 and 2 per record and
// tombstones skipped, every output is written and the group's offset
// reaches the end; a failing write ends Run and its offsets stay
// uncommitted.
func TestSinkAtLeastOnceFanOut(t *testing.T) {
	c := kafkatest.New(t)
	topic, app := kafkatest.Name("sink-in"), kafkatest.Name("sink-app")
	c.CreateTopic(t, topic, 2)
	var recs []*kgo.Record
	for i := range 60 {
		r := &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))}
		if i%10 == 9 {
			r.Value = nil // a tombstone: skipped, its offset still commits
		}
		recs = append(recs, r)
	}
	c.Produce(t, recs...)

	m := &memSink{}
	expand := sink.Expand(func(_ context.Context, r sink.Record[[]byte]) ([]sink.Record[[]byte], error) {
		var i int
		fmt.Sscan(string(r.Value), &i)
		out := make([]sink.Record[[]byte], i%3) // 0, 1 or 2 outputs
		for j := range out {
			out[j] = r
			out[j].Value = fmt.Appendf(nil, "%d.%d", i, j)
		}
		return out, nil
	})
	stop := startSink(t, sink.New[[]byte](m, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce), expand),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic))
	kafkatest.WaitFor(t, 30*time.Second, "committed offsets at the end", func() bool {
		com := c.CommittedOffsets(t, app, topic)
		if com[0] != 30 || com[1] != 30 {
			t.Logf("committed %v, ends %v, written %d", com, c.EndOffsets(t, topic), len(m.values()))
			return false
		}
		return true
	})
	require.NoError(t, stop())
	var want []string
	for i := range 60 {
		if i%10 == 9 {
			continue
		}
		for j := range i % 3 {
			want = append(want, fmt.Sprintf("%d.%d", i, j))
		}
	}
	require.ElementsMatch(t, want, m.values())

	// A write failure ends Run; nothing at or after the failed batch is
	// committed.
	produceN(t, c, topic, 0, 100, 5)
	boom := errors.New("database down")
	failing := &memSink{hook: func(context.Context, []sink.Record[[]byte]) error { return boom }}
	r, err := runner.NewSink(sink.New[[]byte](failing, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, boom)
	var we *sink.WriteError
	require.ErrorAs(t, err, &we)
	require.Equal(t, topic, we.Topic)
	require.Equal(t, int64(30), we.First)
	require.Equal(t, int64(30), c.CommittedOffsets(t, app, topic)[0], "the failed batch was not committed")
}

// commitCounter counts OffsetCommit requests a client sends.
type commitCounter struct{ n atomic.Int64 }

func (h *commitCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.OffsetCommit.Int16() && err == nil {
		h.n.Add(1)
	}
}

// TestSinkKeepalive: an idle partition re-commits its offset every
// CommitKeepalive, and only then.
func TestSinkKeepalive(t *testing.T) {
	c := kafkatest.New(t)
	topic, app := kafkatest.Name("sink-ka"), kafkatest.Name("sink-ka-app")
	c.CreateTopic(t, topic, 1)
	produceN(t, c, topic, 0, 0, 5)
	m := &memSink{}
	var commits commitCounter
	stop := startSink(t, sink.New[[]byte](m, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic),
		runner.CommitKeepalive(400*time.Millisecond), runner.WithKafkaOpts(kgo.WithHooks(&commits)))
	kafkatest.WaitFor(t, 30*time.Second, "offset 5 committed", func() bool { return c.CommittedOffsets(t, app, topic)[0] == 5 })
	before := commits.n.Load()
	time.Sleep(2500 * time.Millisecond) // idle: nothing new to write
	idle := commits.n.Load() - before
	require.GreaterOrEqual(t, idle, int64(3), "an idle partition re-commits every CommitKeepalive")
	require.LessOrEqual(t, idle, int64(9), "keepalive commits are paced by CommitKeepalive, not by poll cycles")
	require.Equal(t, int64(5), c.CommittedOffsets(t, app, topic)[0])
	require.NoError(t, stop())
	require.Len(t, m.values(), 5)
}

// TestSinkOffsetFetchFailure: when the coordinator refuses the
// committed-offset fetch, Run fails at startup (no silent fall back to the
// reset policy) and the sink writes nothing. The embedded broker only: the
// refusal is injected into it.
func TestSinkOffsetFetchFailure(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") != "" {
		t.Skip("injects a coordinator error into the embedded broker; nothing to inject into real Kafka")
	}
	fc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in"))
	require.NoError(t, err)
	defer fc.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(fc.ListenAddrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("x")}).FirstErr())

	var refused atomic.Int64
	fc.ControlKey(kmsg.OffsetFetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		req := kreq.(*kmsg.OffsetFetchRequest)
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.Version = req.Version
		code := kerr.GroupAuthorizationFailed.Code
		resp.ErrorCode = code
		for _, g := range req.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, code
			resp.Groups = append(resp.Groups, rg)
		}
		refused.Add(1)
		return resp, nil, true
	})
	m := &memSink{}
	r, err := runner.NewSink(sink.New[[]byte](m, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(fc.ListenAddrs()...), runner.ApplicationID("app"), runner.InputTopics("in"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrOffsetFetch)
	require.ErrorIs(t, err, kerr.GroupAuthorizationFailed)
	var fe *runner.OffsetFetchError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "app", fe.Group)
	require.NoError(t, ctx.Err(), "Run failed, it did not hang")
	require.Positive(t, refused.Load())
	require.Empty(t, m.values(), "nothing was consumed from the reset policy")
}

// TestSinkCoordinatorNotReady: a group coordinator that is not ready yet
// (a fresh cluster answers COORDINATOR_NOT_AVAILABLE until
// __consumer_offsets exists) delays the committed-offset fetch, it does not
// end Run: the sink starts once the coordinator answers, writes everything
// and commits the end. The embedded broker only: the refusal is injected
// into it (a fresh Apache Kafka shows it for real).
func TestSinkCoordinatorNotReady(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") != "" {
		t.Skip("injects a coordinator error into the embedded broker; nothing to inject into real Kafka")
	}
	fc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	require.NoError(t, err)
	defer fc.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(fc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	for i := range 10 {
		r := &kgo.Record{Topic: "in", Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))}
		require.NoError(t, cl.ProduceSync(context.Background(), r).FirstErr())
	}

	// Every group coordinator lookup is refused for the first second.
	var refused atomic.Int64
	var mu sync.Mutex
	var until time.Time
	fc.ControlKey(kmsg.FindCoordinator.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		req := kreq.(*kmsg.FindCoordinatorRequest)
		if req.CoordinatorType != 0 {
			return nil, nil, false
		}
		mu.Lock()
		if until.IsZero() {
			until = time.Now().Add(time.Second)
		}
		refuse := time.Now().Before(until)
		mu.Unlock()
		if !refuse {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.Version = req.Version
		code := kerr.CoordinatorNotAvailable.Code
		resp.ErrorCode = code
		keys := req.CoordinatorKeys
		if req.Version < 4 {
			keys = []string{req.CoordinatorKey}
		}
		for _, k := range keys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.NodeID, c.ErrorCode = k, -1, code
			resp.Coordinators = append(resp.Coordinators, c)
		}
		refused.Add(1)
		return resp, nil, true
	})

	m := &memSink{}
	stop := startSink(t, sink.New[[]byte](m, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(fc.ListenAddrs()...), runner.ApplicationID("app"), runner.InputTopics("in"))
	adm := kadm.NewClient(cl)
	kafkatest.WaitFor(t, 30*time.Second, "committed offsets at the end", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resps, err := adm.FetchOffsets(ctx, "app")
		if err != nil {
			return false
		}
		o0, _ := resps.Lookup("in", 0)
		o1, _ := resps.Lookup("in", 1)
		return o0.At == 5 && o1.At == 5
	})
	require.NoError(t, stop(), "a coordinator that is not ready yet does not end Run")
	require.Positive(t, refused.Load())
	require.ElementsMatch(t, []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}, m.values())
}

// TestSinkAtMostOnceTimer: an at-most-once sink's offsets are committed on
// the timer, decoupled from writing: they reach the end while the sink has
// written nothing (what a crash would lose).
func TestSinkAtMostOnceTimer(t *testing.T) {
	c := kafkatest.New(t)
	topic, app := kafkatest.Name("sink-amo"), kafkatest.Name("sink-amo-app")
	c.CreateTopic(t, topic, 1)
	produceN(t, c, topic, 0, 0, 10)
	m := &memSink{hook: func(ctx context.Context, _ []sink.Record[[]byte]) error {
		<-ctx.Done() // never writes
		return ctx.Err()
	}}
	stop := startSink(t, sink.New[[]byte](m, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtMostOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic),
		runner.AutoCommitInterval(200*time.Millisecond))
	kafkatest.WaitFor(t, 30*time.Second, "offset 10 committed by the timer", func() bool {
		return c.CommittedOffsets(t, app, topic)[0] == 10
	})
	require.Empty(t, m.values())
	require.NoError(t, stop())
}

// TestSinkStartOffsets: the resume hook's offsets win over the committed
// offset, which stays a floor: a replay behind it is written again but
// never rewinds the group's offset.
func TestSinkStartOffsets(t *testing.T) {
	c := kafkatest.New(t)
	topic, app := kafkatest.Name("sink-start"), kafkatest.Name("sink-start-app")
	c.CreateTopic(t, topic, 2)
	produceN(t, c, topic, 0, 0, 10)
	produceN(t, c, topic, 1, 100, 10)
	opts := []runner.SinkOpt{runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic)}

	// The group committed offset 6 of both partitions.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var offs kadm.Offsets
	for p := range int32(2) {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: 6, LeaderEpoch: -1})
	}
	_, err := c.Adm.CommitOffsets(ctx, app, offs)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 6, 1: 6}, c.CommittedOffsets(t, app, topic))

	// Second run: the resume state says partition 0 at 2 (behind: a
	// replay) and partition 1 at 8 (ahead); no resume state for a
	// partition would mean its committed offset.
	var floorBroken atomic.Bool
	second := &memSink{}
	second.hook = func(context.Context, []sink.Record[[]byte]) error {
		if cur := c.CommittedOffsets(t, app, topic); cur[0] < 6 || cur[1] < 6 {
			floorBroken.Store(true)
		}
		return nil
	}
	resume := sink.Resume(func(_ context.Context, tp string, ps []int32) (map[int32]int64, error) {
		require.Equal(t, topic, tp)
		require.ElementsMatch(t, []int32{0, 1}, ps)
		return map[int32]int64{0: 2, 1: 8}, nil
	})
	stop := startSink(t, sink.New[[]byte](second, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce), resume),
		append(opts, runner.MaxPollRecords(1))...)
	kafkatest.WaitFor(t, 30*time.Second, "committed offsets at the end", func() bool {
		com := c.CommittedOffsets(t, app, topic)
		return com[0] == 10 && com[1] == 10
	})
	require.NoError(t, stop())
	require.ElementsMatch(t, []string{"2", "3", "4", "5", "6", "7", "8", "9", "108", "109"}, second.values())
	require.False(t, floorBroken.Load(), "the replay rewound the committed offset below the floor")
}

// intSink collects the decoded values it was asked to write.
type intSink struct {
	mu     sync.Mutex
	values []int
}

func (s *intSink) Write(_ context.Context, batch []sink.Record[int]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range batch {
		s.values = append(s.values, r.Value)
	}
	return nil
}

func (s *intSink) got() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.values...)
}

// producePoison writes the JSON values 1, 2, a value that does not decode
// (offset 2, with a header), and 4 to partition 0 of topic.
func producePoison(t *testing.T, c *kafkatest.Cluster, topic string) {
	t.Helper()
	c.Produce(t,
		&kgo.Record{Topic: topic, Key: []byte("k1"), Value: []byte("1")},
		&kgo.Record{Topic: topic, Key: []byte("k2"), Value: []byte("2")},
		&kgo.Record{Topic: topic, Key: []byte("k3"), Value: []byte("oops"), Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t3")}}},
		&kgo.Record{Topic: topic, Key: []byte("k4"), Value: []byte("4")},
	)
}

func sinkApp(t *testing.T, prefix string) (*kafkatest.Cluster, string, string) {
	c := kafkatest.New(t)
	topic, app := kafkatest.Name(prefix), kafkatest.Name(prefix+"-app")
	c.CreateTopic(t, topic, 1)
	producePoison(t, c, topic)
	return c, topic, app
}

// TestSinkInvalidSkip: under Skip an undecodable value (and a record Expand
// rejects as invalid) is released at once: the offset commits up to the
// end (lag 0), the others are written, and the skips are counted.
func TestSinkInvalidSkip(t *testing.T) {
	c, topic, app := sinkApp(t, "sink-skip")
	c.Produce(t, &kgo.Record{Topic: topic, Value: []byte("13")}) // rejected by Expand
	s := &intSink{}
	expand := sink.Expand(func(_ context.Context, r sink.Record[int]) ([]sink.Record[int], error) {
		if r.Value == 13 {
			return nil, transformer.Invalid(errors.New("unlucky"))
		}
		return []sink.Record[int]{r}, nil
	})
	r, err := runner.NewSink(sink.New[int](s, sink.Delivery(sink.AtLeastOnce), expand),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic),
		runner.InvalidRecords(runner.Skip))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	kafkatest.WaitFor(t, 30*time.Second, "the offset past every record committed (lag 0)", func() bool {
		return c.CommittedOffsets(t, app, topic)[0] == c.EndOffsets(t, topic)[0]
	})
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, []int{1, 2, 4}, s.got())
	require.Equal(t, int64(2), r.Stats().InvalidSkipped)
}

// TestSinkInvalidSubstitute: under Substitute the hook's value is decoded
// and handed on in place of the invalid one.
func TestSinkInvalidSubstitute(t *testing.T) {
	c, topic, app := sinkApp(t, "sink-sub")
	s := &intSink{}
	var seen atomic.Int64
	hook := func(ie *transformer.InvalidRecordError) ([]byte, error) {
		seen.Store(ie.Offset)
		return []byte("-1"), nil
	}
	stop := startSink(t, sink.New[int](s, sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic),
		runner.InvalidRecords(runner.Substitute(hook)))
	kafkatest.WaitFor(t, 30*time.Second, "offset 4 committed", func() bool { return c.CommittedOffsets(t, app, topic)[0] == 4 })
	require.NoError(t, stop())
	require.Equal(t, []int{1, 2, -1, 4}, s.got())
	require.Equal(t, int64(2), seen.Load())
}

// TestSinkInvalidCrash: by default an undecodable value ends Run with a
// *transformer.InvalidRecordError naming the record, and nothing at or past
// it commits.
func TestSinkInvalidCrash(t *testing.T) {
	c, topic, app := sinkApp(t, "sink-crash")
	s := &intSink{}
	r, err := runner.NewSink(sink.New[int](s, sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	var ie *transformer.InvalidRecordError
	require.ErrorAs(t, err, &ie)
	require.ErrorIs(t, err, transformer.ErrInvalidRecord)
	require.Equal(t, topic, ie.Topic)
	require.Equal(t, int32(0), ie.Partition)
	require.Equal(t, int64(2), ie.Offset)
	require.Equal(t, transformer.PartValue, ie.Part)
	require.Equal(t, []byte("oops"), ie.Value)
	require.Equal(t, []byte("k3"), ie.Key)
	require.Less(t, c.CommittedOffsets(t, app, topic)[0], int64(3), "nothing at or past the invalid record commits")
	require.NotContains(t, s.got(), 4)
}

// TestSinkInvalidDeadLetter: under DeadLetter the original record lands in
// the dead-letter topic with the KIP-1034 headers, and the offset commits
// past it.
func TestSinkInvalidDeadLetter(t *testing.T) {
	c, topic, app := sinkApp(t, "sink-dlq")
	dlq := kafkatest.Name("sink-dlq-dead")
	c.CreateTopic(t, dlq, 1)
	s := &intSink{}
	r, err := runner.NewSink(sink.New[int](s, sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic),
		runner.InvalidRecords(runner.DeadLetter(dlq)))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	defer cancel()
	go func() { done <- r.Run(ctx) }()
	kafkatest.WaitFor(t, 30*time.Second, "offset 4 committed", func() bool { return c.CommittedOffsets(t, app, topic)[0] == 4 })
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, []int{1, 2, 4}, s.got())
	require.Equal(t, int64(1), r.Stats().InvalidDeadLettered)

	dead := c.ReadCommitted(t, dlq)
	require.Len(t, dead, 1)
	d := dead[0]
	require.Equal(t, []byte("k3"), d.Key)
	require.Equal(t, []byte("oops"), d.Value)
	hs := map[string]string{}
	for _, h := range d.Headers {
		hs[h.Key] = string(h.Value)
	}
	require.Equal(t, "t3", hs["trace"], "the original headers are kept")
	require.Equal(t, topic, hs["__streams.errors.topic"])
	require.Equal(t, "0", hs["__streams.errors.partition"])
	require.Equal(t, "2", hs["__streams.errors.offset"])
	require.Equal(t, "value", hs["__flechtwerk.errors.part"])
	require.NotEmpty(t, hs["__streams.errors.message"])
	require.NotEmpty(t, hs["__streams.errors.exception"])
	require.NotEmpty(t, hs["__streams.errors.stacktrace"])
}

// TestSinkInvalidDeadLetterMissingTopic: a dead-letter topic that does not
// exist is a startup error of the sink, and the sink writes nothing.
func TestSinkInvalidDeadLetterMissingTopic(t *testing.T) {
	c, topic, app := sinkApp(t, "sink-nodlq")
	s := &intSink{}
	r, err := runner.NewSink(sink.New[int](s, sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic),
		runner.InvalidRecords(runner.DeadLetter(kafkatest.Name("sink-nodlq-missing"))))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrMissingTopic)
	require.ErrorContains(t, err, "sink-nodlq-missing")
	require.Empty(t, s.got())
}

// TestSinkReady: a sink is Running and ready once its start-up checks
// passed, in both delivery modes; it is not while they fail.
func TestSinkReady(t *testing.T) {
	c := kafkatest.New(t)
	for _, d := range []sink.Mode{sink.AtLeastOnce, sink.AtMostOnce} {
		t.Run(d.String(), func(t *testing.T) {
			topic, app := kafkatest.Name("sink-ready"), kafkatest.Name("sink-ready-app")
			c.CreateTopic(t, topic, 1)
			r, err := runner.NewSink(sink.New[[]byte](&memSink{}, sink.ValueCodec(transformer.Bytes()), sink.Delivery(d)),
				runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(topic))
			require.NoError(t, err)
			stop := startRunner(t, r)
			kafkatest.WaitFor(t, 30*time.Second, "the sink is ready", func() bool { return r.Ready() == nil })
			st, _ := r.State()
			require.Equal(t, runner.Running, st)
			require.NoError(t, stop())
		})
	}
	t.Run("missing input topic", func(t *testing.T) {
		r, err := runner.NewSink(sink.New[[]byte](&memSink{}, sink.ValueCodec(transformer.Bytes()), sink.Delivery(sink.AtLeastOnce)),
			runner.SeedBrokers(c.Brokers...), runner.ApplicationID(kafkatest.Name("sink-ready-app")), runner.InputTopics(kafkatest.Name("absent")))
		require.NoError(t, err)
		err = r.Run(context.Background())
		require.Error(t, err)
		require.Error(t, r.Ready())
		st, _ := r.State()
		require.Equal(t, runner.Failed, st)
	})
}
