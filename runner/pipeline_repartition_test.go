package runner_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// splitCount returns a pipeline: split reads splitIn and re-keys its
// words into the repartition topic words, count reads words and countIn
// (a co-partitioned join when countIn is given) and counts into out.
func splitCount(t *testing.T, c *kafkatest.Cluster, name, splitApp, countApp, out string, partitions int32,
	splitIn []string, countIn ...string) (*runner.Pipeline, string) {
	t.Helper()
	p, err := runner.NewPipeline(name, runner.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	words := p.Repartition("words", splitApp, countApp, partitions)
	_, err = p.AddTransformer(splitter(&words), runner.ApplicationID(splitApp), runner.InputTopics(splitIn...))
	require.NoError(t, err)
	_, err = p.AddTransformer(wordCounter(out), runner.ApplicationID(countApp),
		runner.InputTopics(append([]string{words}, countIn...)...), runner.StateDir(t.TempDir()))
	require.NoError(t, err)
	return p, words
}

// topicConfig returns the value of config key of topic.
func topicConfig(t *testing.T, c *kafkatest.Cluster, topic, key string) string {
	t.Helper()
	rcs, err := c.Adm.DescribeTopicConfigs(context.Background(), topic)
	require.NoError(t, err)
	rc, err := rcs.On(topic, nil)
	require.NoError(t, err)
	for _, kv := range rc.Configs {
		if kv.Key == key {
			return kv.MaybeValue()
		}
	}
	t.Fatalf("topic %s: config %s not described", topic, key)
	return ""
}

// topicExists reports whether the metadata lists topic.
func topicExists(t *testing.T, c *kafkatest.Cluster, topic string) bool {
	t.Helper()
	d, err := c.Adm.ListTopics(context.Background(), topic)
	require.NoError(t, err)
	td, ok := d[topic]
	return ok && td.Err == nil
}

// TestPipelineRepartitionSizedFromJoinedInput: a repartition topic with
// partitions 0 whose reading stage also reads another topic (a
// co-partitioned join) gets that topic's partition count, not the count
// of the sending stage's input, and the pipeline runs.
func TestPipelineRepartitionSizedFromJoinedInput(t *testing.T) {
	c := kafkatest.New(t)
	in, table, out := kafkatest.Name("in"), kafkatest.Name("table"), kafkatest.Name("out")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, in, 3)
	c.CreateTopic(t, table, 2)
	c.CreateTopic(t, out, 2)
	p, words := splitCount(t, c, "join", splitApp, countApp, out, 0, []string{in}, table)
	c.Produce(t, &kgo.Record{Topic: in, Partition: 0, Value: []byte("a b c")})
	_, done := runPipeline(t, p)
	waitCommitted(t, c, splitApp, in, done)
	waitCommitted(t, c, countApp, words, done)
	d, err := c.Adm.ListTopics(context.Background(), words)
	require.NoError(t, err)
	require.Len(t, d[words].Partitions, 2, "sized from the joined input, not from the sender's (3)")
	// A task of the table may still restore after the words committed.
	kafkatest.WaitFor(t, 30*time.Second, "the pipeline ready", func() bool { return p.Ready() == nil })
}

// TestPipelineRepartitionCopartitionChecked: a repartition count that
// disagrees with the reading stage's other inputs (given, or those
// inputs disagreeing among themselves) fails Run with
// PARTITION_COUNT_MISMATCH naming the stage, before the topic is created.
func TestPipelineRepartitionCopartitionChecked(t *testing.T) {
	c := kafkatest.New(t)
	in, t2, t3, out := kafkatest.Name("in"), kafkatest.Name("t2"), kafkatest.Name("t3"), kafkatest.Name("out")
	c.CreateTopic(t, in, 3)
	c.CreateTopic(t, t2, 2)
	c.CreateTopic(t, t3, 3)
	c.CreateTopic(t, out, 2)
	tests := []struct {
		name       string
		partitions int32
		joined     []string
	}{
		{name: "given count differs", partitions: 3, joined: []string{t2}},
		{name: "joined inputs differ", partitions: 0, joined: []string{t2, t3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
			p, words := splitCount(t, c, "copart", splitApp, countApp, out, tc.partitions, []string{in}, tc.joined...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := p.Run(ctx)
			require.ErrorIs(t, err, flechtwerk.ErrPartitionMismatch)
			require.ErrorContains(t, err, "stage "+countApp)
			require.False(t, topicExists(t, c, words), "nothing created")
		})
	}
}

// TestPipelineRepartitionRetentionAndPurge checks that a created
// repartition topic keeps its records for any age (retention.ms=-1,
// cleanup.policy=delete) and that the running pipeline deletes the
// records its reading stage committed.
func TestPipelineRepartitionRetentionAndPurge(t *testing.T) {
	defer runner.SetPipelineTimings(200*time.Millisecond, 30*time.Second)()
	c := kafkatest.New(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	p, words := splitCount(t, c, "purge", splitApp, countApp, out, 0, []string{in})
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: in, Partition: int32(i % 2), Value: []byte("w" + strconv.Itoa(i%7) + " x")})
	}
	c.Produce(t, recs...)
	_, done := runPipeline(t, p)
	waitCommitted(t, c, splitApp, in, done)
	waitCommitted(t, c, countApp, words, done)

	require.Equal(t, "-1", topicConfig(t, c, words, "retention.ms"))
	require.Equal(t, "delete", topicConfig(t, c, words, "cleanup.policy"))
	committed := c.CommittedOffsets(t, countApp, words)
	require.Len(t, committed, 2)
	for part, o := range committed {
		require.Positive(t, o, "partition %d", part)
	}
	kafkatest.WaitFor(t, 30*time.Second, "committed records of "+words+" purged", func() bool {
		starts, err := c.Adm.ListStartOffsets(context.Background(), words)
		require.NoError(t, err)
		ok := true
		starts.Each(func(o kadm.ListedOffset) {
			ok = ok && o.Err == nil && o.Offset == committed[o.Partition]
		})
		return ok
	})
	select {
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	default:
	}
}

// TestPipelineRepartitionPolicyRefused: an existing repartition topic that
// is compacted, or whose retention deletes records for their age or the
// partition's size, fails Run with REPARTITION_POLICY_MISMATCH naming it
// and the config to set, and no stage starts.
func TestPipelineRepartitionPolicyRefused(t *testing.T) {
	c := kafkatest.New(t)
	tests := []struct {
		name, key, value, want string
	}{
		{name: "compacted", key: "cleanup.policy", value: "compact", want: "cleanup.policy=compact"},
		{name: "retention.ms of 7 days", key: "retention.ms", value: "604800000", want: "retention.ms=604800000"},
		{name: "retention.bytes", key: "retention.bytes", value: "1048576", want: "retention.bytes=1048576"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, out := kafkatest.Name("in"), kafkatest.Name("out")
			splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
			c.CreateTopic(t, in, 2)
			c.CreateTopic(t, out, 2)
			words := runner.RepartitionTopic(countApp, "words")
			cfg := map[string]*string{tc.key: kadm.StringPtr(tc.value)}
			if tc.key != "retention.ms" {
				cfg["retention.ms"] = kadm.StringPtr("-1") // only tc.key is wrong
			}
			_, err := c.Adm.CreateTopic(context.Background(), 2, -1, cfg, words)
			require.NoError(t, err)
			c.WaitTopic(t, words, 2)
			p, _ := splitCount(t, c, "refuse", splitApp, countApp, out, 0, []string{in})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = p.Run(ctx)
			require.ErrorIs(t, err, flechtwerk.ErrRepartitionPolicy)
			require.ErrorContains(t, err, words)
			require.ErrorContains(t, err, tc.want)
			if tc.key != "cleanup.policy" {
				require.ErrorContains(t, err, tc.key+"=-1", "says what to set")
			}
			st, _ := p.Stage(splitApp).State()
			require.Equal(t, runner.NotStarted, st, "no stage started")
		})
	}
}

// startOffsets returns the first offset of every partition of topic.
func startOffsets(t *testing.T, c *kafkatest.Cluster, topic string) map[int32]int64 {
	t.Helper()
	starts, err := c.Adm.ListStartOffsets(context.Background(), topic)
	require.NoError(t, err)
	got := map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		got[o.Partition] = o.Offset
	})
	return got
}

// TestPipelineRepartitionPurgeWaitsForEveryReader: a second stage reading
// a repartition topic (besides its declared reading stage) that is blocked
// on partition 1 keeps that partition's records while the declared reader
// has committed them all, and later reads every one of them; partition 0,
// which both readers committed, is purged, and so is partition 1 once the
// second reader committed it.
func TestPipelineRepartitionPurgeWaitsForEveryReader(t *testing.T) {
	defer runner.SetPipelineTimings(200*time.Millisecond, 30*time.Second)()
	c := kafkatest.New(t)
	in, out, audited := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("audited")
	splitApp, countApp, auditApp := kafkatest.Name("split"), kafkatest.Name("count"), kafkatest.Name("audit")
	for _, tp := range []string{in, out, audited} {
		c.CreateTopic(t, tp, 2)
	}
	p, words := splitCount(t, c, "readers", splitApp, countApp, out, 0, []string{in})
	release := make(chan struct{})
	var blocked atomic.Bool
	audit := transformer.Stateless(func(ctx context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		if rec.Partition == 1 {
			blocked.Store(true)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		o.Send(audited, rec.Key, rec.Value)
		return nil
	})
	_, err := p.AddTransformer(audit, runner.ApplicationID(auditApp), runner.InputTopics(words),
		runner.BatchTimeout(50*time.Second))
	require.NoError(t, err)
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: in, Partition: int32(i % 2), Value: []byte("w" + strconv.Itoa(i%7) + " x")})
	}
	c.Produce(t, recs...)
	_, done := runPipeline(t, p)
	waitCommitted(t, c, splitApp, in, done)
	waitCommitted(t, c, countApp, words, done)
	ends := c.EndOffsets(t, words)
	require.Positive(t, ends[0])
	require.Positive(t, ends[1], "both partitions of %s hold records", words)
	kafkatest.WaitFor(t, 30*time.Second, "the audit stage blocked on partition 1", blocked.Load)
	kafkatest.WaitFor(t, 30*time.Second, auditApp+" committed partition 0", func() bool {
		return c.CommittedOffsets(t, auditApp, words)[0] == ends[0]
	})

	// The round that purged partition 0 saw every commit of the count
	// stage on partition 1 too.
	kafkatest.WaitFor(t, 30*time.Second, "partition 0, committed by both readers, purged", func() bool {
		return startOffsets(t, c, words)[0] == ends[0]
	})
	time.Sleep(time.Second) // more purge rounds
	require.Zero(t, startOffsets(t, c, words)[1], "partition 1 kept for the blocked reader")
	require.Zero(t, c.CommittedOffsets(t, auditApp, words)[1], "the audit stage committed nothing of partition 1")

	close(release)
	waitCommitted(t, c, auditApp, words, done)
	require.Len(t, c.ReadCommitted(t, audited), 40, "the audit stage read every word of the 20 sentences")
	kafkatest.WaitFor(t, 30*time.Second, "partition 1 purged once both readers committed it", func() bool {
		starts := startOffsets(t, c, words)
		return starts[0] == ends[0] && starts[1] == ends[1]
	})
}

// TestPipelineRepartitionWaitsForLeaders: a created repartition topic
// whose partitions have no leader in the metadata is not handed to the
// stages; Run fails with TOPIC_CREATE_FAILED naming it once the wait is
// over.
func TestPipelineRepartitionWaitsForLeaders(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") != "" {
		t.Skip("injects leaderless metadata into the embedded broker")
	}
	defer runner.SetPipelineTimings(30*time.Second, 2*time.Second)()
	c, fc := kafkatest.Fake(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	words := runner.RepartitionTopic(countApp, "words")
	host, port, err := net.SplitHostPort(fc.ListenAddrs()[0])
	require.NoError(t, err)
	portN, err := strconv.Atoi(port)
	require.NoError(t, err)
	var faked atomic.Int64
	fc.ControlKey(kmsg.Metadata.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		req := kreq.(*kmsg.MetadataRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic == nil || *req.Topics[0].Topic != words {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.Version = req.Version
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 0, host, int32(portN)
		resp.Brokers = append(resp.Brokers, b)
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = kmsg.StringPtr(words)
		for i := range int32(2) {
			rp := kmsg.NewMetadataResponseTopicPartition()
			rp.Partition, rp.Leader, rp.ErrorCode = i, -1, kerr.LeaderNotAvailable.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
		faked.Add(1)
		return resp, nil, true
	})
	p, _ := splitCount(t, c, "leaders", splitApp, countApp, out, 0, []string{in})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrTopicCreate)
	require.ErrorContains(t, err, words)
	require.NoError(t, ctx.Err(), "Run failed, it did not hang")
	require.Positive(t, faked.Load())
	st, _ := p.Stage(countApp).State()
	require.Equal(t, runner.NotStarted, st, "no stage started")
}

// TestPipelineRepartitionDeclarationOrder declares a chain's repartition
// topics downstream-first, the second sized from the first: the first
// Run creates both, with the input's partition count.
func TestPipelineRepartitionDeclarationOrder(t *testing.T) {
	c := kafkatest.New(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	a, b, cc := kafkatest.Name("a"), kafkatest.Name("b"), kafkatest.Name("c")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	p, err := runner.NewPipeline("order", runner.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	second := p.Repartition("two", b, cc, 0) // sized from b's input, "one", declared below
	first := p.Repartition("one", a, b, 0)
	_, err = p.AddTransformer(splitter(&first), runner.ApplicationID(a), runner.InputTopics(in))
	require.NoError(t, err)
	_, err = p.AddTransformer(splitter(&second), runner.ApplicationID(b), runner.InputTopics(first))
	require.NoError(t, err)
	_, err = p.AddTransformer(wordCounter(out), runner.ApplicationID(cc), runner.InputTopics(second), runner.StateDir(t.TempDir()))
	require.NoError(t, err)
	c.Produce(t, &kgo.Record{Topic: in, Partition: 1, Value: []byte("x y")})
	_, done := runPipeline(t, p)
	waitCommitted(t, c, a, in, done)
	waitCommitted(t, c, b, first, done)
	waitCommitted(t, c, cc, second, done)
	require.Len(t, c.ReadCommitted(t, out), 2)
	for _, tp := range []string{first, second} {
		d, err := c.Adm.ListTopics(context.Background(), tp)
		require.NoError(t, err)
		require.Len(t, d[tp].Partitions, 2, tp)
	}
}

// TestPipelineRepartitionCycle: repartition topics sized from each other
// are a coded error of Run.
func TestPipelineRepartitionCycle(t *testing.T) {
	p, err := runner.NewPipeline("cycle", runner.SeedBrokers("127.0.0.1:1"))
	require.NoError(t, err)
	ab := p.Repartition("ab", "a", "b", 0)
	ba := p.Repartition("ba", "b", "a", 0)
	_, err = p.AddTransformer(splitter(&ab), runner.ApplicationID("a"), runner.InputTopics(ba))
	require.NoError(t, err)
	_, err = p.AddTransformer(splitter(&ba), runner.ApplicationID("b"), runner.InputTopics(ab))
	require.NoError(t, err)
	err = p.Run(context.Background())
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	require.ErrorContains(t, err, "cycle")
}

// TestPipelineCanceledBeforeStart: Run with a canceled ctx returns nil,
// as its doc says, and creates nothing.
func TestPipelineCanceledBeforeStart(t *testing.T) {
	c := kafkatest.New(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	p, words := splitCount(t, c, "cancel", splitApp, countApp, out, 0, []string{in})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, p.Run(ctx))
	require.False(t, topicExists(t, c, words))
}

// TestPipelineMissingSizingInput: an input that sizes a repartition topic
// and does not exist is MISSING_TOPIC naming it.
func TestPipelineMissingSizingInput(t *testing.T) {
	c := kafkatest.New(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, out, 2)
	p, _ := splitCount(t, c, "missing", splitApp, countApp, out, 0, []string{in})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrMissingTopic)
	require.ErrorContains(t, err, in)
}

// TestPipelineSizingInputRefused: a sizing input the broker refuses to
// describe is not reported as missing: the error keeps its cause
// (NOT_AUTHORIZED, the broker's TOPIC_AUTHORIZATION_FAILED).
func TestPipelineSizingInputRefused(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") != "" {
		t.Skip("injects a metadata error into the embedded broker")
	}
	c, fc := kafkatest.Fake(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	fc.ControlKey(kmsg.Metadata.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		req := kreq.(*kmsg.MetadataRequest)
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.Version = req.Version
		found := false
		for _, rt := range req.Topics {
			if rt.Topic != nil && *rt.Topic == in {
				found = true
			}
		}
		if !found {
			return nil, nil, false
		}
		for _, rt := range req.Topics {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic = rt.Topic
			mt.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, mt)
		}
		return resp, nil, true
	})
	p, _ := splitCount(t, c, "refused", splitApp, countApp, out, 0, []string{in})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrNotAuthorized)
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	require.NotErrorIs(t, err, flechtwerk.ErrMissingTopic)
}

// TestPipelineDeclarationsAfterRun: a stage added after Run is a coded
// error, and a Repartition call after Run panics with a coded error
// naming the topic, leaving the running pipeline alone.
func TestPipelineDeclarationsAfterRun(t *testing.T) {
	c := kafkatest.New(t)
	in, out := kafkatest.Name("in"), kafkatest.Name("out")
	splitApp, countApp := kafkatest.Name("split"), kafkatest.Name("count")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	p, _ := splitCount(t, c, "late", splitApp, countApp, out, 0, []string{in})
	_, done := runPipeline(t, p)
	kafkatest.WaitFor(t, 30*time.Second, "the pipeline ready", func() bool { return p.Ready() == nil })

	_, err := p.AddTransformer(wordCounter(out), runner.ApplicationID(kafkatest.Name("x")), runner.InputTopics(in))
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	require.ErrorContains(t, err, "after Run")

	late := runner.RepartitionTopic(countApp, "late")
	func() {
		defer func() {
			r := recover()
			err, ok := r.(error)
			require.True(t, ok, "Repartition after Run panics with an error, got %v", r)
			require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
			require.ErrorContains(t, err, late)
		}()
		p.Repartition("late", splitApp, countApp, 0)
	}()
	require.False(t, topicExists(t, c, late))
	require.NoError(t, p.Ready(), "the running pipeline is left alone")
	select {
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	default:
	}
}
