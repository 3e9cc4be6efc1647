package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/task"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestOutputRecords: what a read_committed consumer sees of a
// transformer's outputs. A plain output carries the input's timestamp and
// (InputHeaders) its headers, and goes to the murmur2 partition of its
// key; one with ToPartition, its own timestamp and headers goes to its
// partition with the input's headers first; a typed output of a topic
// declared to be created is encoded by its codecs, partitioned by its
// PartitionBy, and its topic was created at start with the declared
// partition count and config.
func TestOutputRecords(t *testing.T) {
	c := kafkatest.New(t)
	in, out, typed, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("typed"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 4)
	counts := transformer.DeclareOutput(typed, transformer.String(), transformer.JSON[int](),
		transformer.CreateTopic(3, map[string]string{"retention.ms": "3600000"}),
		transformer.PartitionBy(func(key []byte, n int32) int32 { return int32(len(key)) % n }))
	own := time.UnixMilli(1_700_000_000_000)
	st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		o.Send(out, rec.Key, rec.Value)
		o.SendRecord(transformer.Output{Topic: out, Key: rec.Key, Value: []byte("explicit"), Timestamp: own,
			Headers: []transformer.Header{{Key: "own", Value: []byte("x")}}}.ToPartition(3))
		n, _ := strconv.Atoi(string(rec.Value))
		return counts.Send(o, string(rec.Key), n)
	}, transformer.InputHeaders(), transformer.Produces(counts))

	const n = 20
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: in, Partition: int32(i % 2), Key: []byte("key-" + strconv.Itoa(i%7)),
			Value: []byte(strconv.Itoa(i)), Timestamp: time.UnixMilli(1_600_000_000_000 + int64(i)),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte(strconv.Itoa(i))}}})
	}
	c.Produce(t, recs...)
	byValue := map[string]*kgo.Record{}
	for _, r := range recs {
		byValue[string(r.Value)] = r
	}

	rn := start(t, c, st, runner.ApplicationID(app), runner.InputTopics(in))
	waitCommitted(t, c, app, in, 60*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	outs := readStable(t, c, out)
	require.Len(t, outs, 2*n)
	explicit := 0
	for _, r := range outs {
		if string(r.Value) == "explicit" {
			explicit++
			require.Equal(t, int32(3), r.Partition)
			require.Equal(t, own, r.Timestamp)
			require.Len(t, r.Headers, 2)
			require.Equal(t, "trace", r.Headers[0].Key, "the input's headers come first")
			require.Equal(t, kgo.RecordHeader{Key: "own", Value: []byte("x")}, r.Headers[1])
			continue
		}
		src := byValue[string(r.Value)]
		require.NotNil(t, src, "output %q", r.Value)
		require.Equal(t, transformer.Murmur2(r.Key, 4), r.Partition, "murmur2 partition of %q", r.Key)
		require.Equal(t, src.Timestamp, r.Timestamp, "the input's timestamp")
		require.Equal(t, src.Headers, r.Headers, "the input's headers")
	}
	require.Equal(t, n, explicit)

	c.WaitTopic(t, typed, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rcs, err := c.Adm.DescribeTopicConfigs(ctx, typed)
	require.NoError(t, err)
	rc, err := rcs.On(typed, nil)
	require.NoError(t, err)
	retention := ""
	for _, cfg := range rc.Configs {
		if cfg.Key == "retention.ms" && cfg.Value != nil {
			retention = *cfg.Value
		}
	}
	require.Equal(t, "3600000", retention, "created with the declared config")

	touts := readStable(t, c, typed)
	require.Len(t, touts, n)
	seen := map[int]bool{}
	for _, r := range touts {
		k, v, err := counts.Decode(transformer.Output{Key: r.Key, Value: r.Value})
		require.NoError(t, err)
		src := byValue[strconv.Itoa(v)]
		require.NotNil(t, src)
		require.Equal(t, string(src.Key), k)
		require.Equal(t, int32(len(k))%3, r.Partition, "PartitionBy")
		require.Equal(t, src.Timestamp, r.Timestamp)
		seen[v] = true
	}
	require.Len(t, seen, n, "every typed output once")
}

// TestMissingOutputTopicFailsAtStart: a declared output topic that does
// not exist, and is not declared to be created, ends Run at start with
// flechtwerk.ErrMissingTopic naming it: no transform ran, no offset was
// committed, and the topic was not created.
func TestMissingOutputTopicFailsAtStart(t *testing.T) {
	c := kafkatest.New(t)
	in, missing, app := kafkatest.Name("in"), kafkatest.Name("missing"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.Produce(t, values(in, 0, "v", 5, 2)...)
	decl := transformer.DeclareOutput(missing, transformer.Bytes(), transformer.Bytes())
	var mu sync.Mutex
	calls := 0
	st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return decl.Send(o, rec.Key, rec.Value)
	}, transformer.Produces(decl))
	r, err := runner.NewTransformer(st, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
		runner.WithLogger(logger(t)))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrMissingTopic)
	require.ErrorContains(t, err, missing)
	mu.Lock()
	require.Zero(t, calls, "no transform ran")
	mu.Unlock()
	require.Empty(t, c.CommittedOffsets(t, app, in), "no offset committed")
	topics, err := c.Adm.ListTopics(ctx, missing)
	require.NoError(t, err)
	require.False(t, topics.Has(missing), "not created")
}

// TestOutputPartitionOutOfRange: an output sent to a partition its topic
// does not have fails the task's transaction with a coded error naming
// topic and partition: nothing of the transaction is visible and no
// offset was committed.
func TestOutputPartitionOutOfRange(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 2)
	c.Produce(t, values(in, 0, "v", 5, 2)...)
	st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		o.Send(out, rec.Key, rec.Value) // fine alone; aborted with the rest
		o.SendRecord(transformer.Output{Topic: out, Key: rec.Key, Value: rec.Value}.ToPartition(7))
		return nil
	})
	rn := start(t, c, st, runner.ApplicationID(app), runner.InputTopics(in))
	err := rn.wait(t, 60*time.Second)
	require.ErrorIs(t, err, flechtwerk.ErrOutputPartition)
	oe, ok := errors.AsType[*flechtwerk.OutputError](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, out, oe.Topic)
	require.Equal(t, int32(7), oe.Partition)
	require.Equal(t, int32(2), oe.Partitions)
	require.ErrorContains(t, err, fmt.Sprintf("topic %s partition 7", out))
	require.Empty(t, readStable(t, c, out), "the transaction was aborted")
	require.Empty(t, c.CommittedOffsets(t, app, in), "no offset committed")
}

// lifeCodec is a JSON codec with a flechtwerk.Lifecycle: it counts its
// opens and closes and refuses to encode outside them, or to open when
// openErr is set.
type lifeCodec struct {
	openErr error

	mu             sync.Mutex
	opens, closes  int
	encodedOutside bool
}

func (l *lifeCodec) Open(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.openErr != nil {
		return l.openErr
	}
	l.opens++
	return nil
}

func (l *lifeCodec) Close(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closes++
	return nil
}

func (l *lifeCodec) Encode(v int) ([]byte, error) {
	l.mu.Lock()
	if l.opens != 1 || l.closes != 0 {
		l.encodedOutside = true
	}
	l.mu.Unlock()
	return []byte(strconv.Itoa(v)), nil
}

func (l *lifeCodec) Decode(b []byte) (int, error) { return strconv.Atoi(string(b)) }

// TestOutputCodecLifecycle: a declared output's codec that implements
// flechtwerk.Lifecycle is opened before the first record and closed after
// Run; one whose Open fails ends Run at start (flechtwerk.ErrStageOpen)
// with nothing processed or committed.
func TestOutputCodecLifecycle(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("open fails %v", fail), func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 2)
			c.Produce(t, values(in, 0, "v", 5, 2)...)
			codec := &lifeCodec{}
			cause := errors.New("schema not found")
			if fail {
				codec.openErr = cause
			}
			decl := transformer.DeclareOutput[string, int](out, transformer.String(), codec, transformer.CreateTopic(2, nil))
			st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
				return decl.Send(o, string(rec.Key), len(rec.Value))
			}, transformer.Produces(decl))
			rn := start(t, c, st, runner.ApplicationID(app), runner.InputTopics(in))
			if fail {
				err := rn.wait(t, 60*time.Second)
				require.ErrorIs(t, err, flechtwerk.ErrStageOpen)
				require.ErrorIs(t, err, cause)
				require.Empty(t, c.CommittedOffsets(t, app, in), "nothing committed")
				codec.mu.Lock()
				defer codec.mu.Unlock()
				require.Zero(t, codec.closes, "a codec that did not open is not closed")
				return
			}
			waitCommitted(t, c, app, in, 60*time.Second, rn.done)
			require.NoError(t, rn.stop(t))
			require.Len(t, readStable(t, c, out), 5)
			codec.mu.Lock()
			defer codec.mu.Unlock()
			require.Equal(t, 1, codec.opens)
			require.Equal(t, 1, codec.closes)
			require.False(t, codec.encodedOutside, "encoded outside Open..Close")
		})
	}
}

// plainProcessor is a process.Processor of its own (no transformer stage):
// it forwards each record to out as &kgo.Record{Topic, Key, Value}, whose
// Partition is the zero value 0.
type plainProcessor struct{ out string }

func (plainProcessor) Validate() error { return nil }
func (plainProcessor) Stateful() bool  { return false }
func (plainProcessor) Prepare(r *kgo.Record) (process.Input, error) {
	return process.Input{Record: r, Key: r.Key}, nil
}
func (p plainProcessor) Process(_ context.Context, in process.Input, _ []byte, _ bool) (process.Result, error) {
	return process.Result{Outputs: []*kgo.Record{{Topic: p.out, Key: in.Record.Key, Value: in.Record.Value}}}, nil
}

// TestOutputPlainProcessorHashesKeys: the outputs of a Processor that sets
// no partition go to the murmur2 partition of their key, as Kafka's
// default partitioner places them, not all to partition 0.
func TestOutputPlainProcessorHashesKeys(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	details, err := c.Adm.ListTopics(ctx, in)
	require.NoError(t, err)
	inputs := values(in, 0, "v", 32, 32)
	c.Produce(t, inputs...)
	member := c.JoinGroup(t, app, in)

	tk, err := task.Start(ctx, task.Config{
		ApplicationID:      app,
		Partition:          0,
		InputTopics:        []string{in},
		TopicIDs:           map[string][16]byte{in: details[in].ID},
		StateDir:           t.TempDir(),
		TransactionTimeout: 30 * time.Second,
		KafkaOpts:          []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		Member:             member.Identity,
	}, plainProcessor{out: out})
	require.NoError(t, err)
	t.Cleanup(func() { tk.Close() })
	require.NoError(t, tk.Restore(ctx, c.Adm))
	b, err := tk.Process(ctx, inputs, make(chan struct{}, 4))
	require.NoError(t, err)
	require.NoError(t, tk.Commit(ctx, b))

	outs := readStable(t, c, out)
	require.Len(t, outs, len(inputs))
	parts := map[int32]bool{}
	for _, o := range outs {
		require.Equal(t, transformer.Murmur2(o.Key, 8), o.Partition, "key %s", o.Key)
		parts[o.Partition] = true
	}
	require.Greater(t, len(parts), 1, "32 keys over 8 partitions")
}

// TestOutputPartitionerPanics: a PartitionFunc that panics (it runs in
// the producer's goroutine) does not end the process: the task's
// transaction aborts and Run ends with a coded error naming the topic
// whose chain holds the *flechtwerk.PanicError; nothing is visible and no
// offset was committed.
func TestOutputPartitionerPanics(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 2)
	c.Produce(t, values(in, 0, "v", 5, 2)...)
	st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		o.Send(out, rec.Key, rec.Value)
		return nil
	}, transformer.Partitioner(out, func([]byte, int32) int32 { panic("no partition for you") }))
	rn := start(t, c, st, runner.ApplicationID(app), runner.InputTopics(in))
	err := rn.wait(t, 60*time.Second)
	require.ErrorIs(t, err, flechtwerk.ErrOutputPartition)
	oe, ok := errors.AsType[*flechtwerk.OutputError](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, out, oe.Topic)
	pe, ok := errors.AsType[*flechtwerk.PanicError](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, "no partition for you", pe.Value)
	require.ErrorContains(t, err, "output to topic "+out)
	require.Empty(t, readStable(t, c, out), "the transaction was aborted")
	require.Empty(t, c.CommittedOffsets(t, app, in), "no offset committed")
}

// TestOutputToChangelogRefused: an output record a transform sends to its
// stage's own changelog (even to an explicit partition) ends Run with
// DUPLICATE_TOPIC before anything of the batch is produced: no restore can
// load it as some key's state.
func TestOutputToChangelogRefused(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, values(in, 0, "v", 3, 1)...)
	cl := changelog.Topic(app)
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		e.Send(out, rec.Key, rec.Value)
		e.SendRecord(transformer.Output{Topic: cl, Key: []byte("other-key"), Value: []byte("garbage")}.ToPartition(0))
		return nil
	})
	rn := start(t, c, st, runner.ApplicationID(app), runner.InputTopics(in), runner.StateDir(t.TempDir()))
	err := rn.wait(t, 60*time.Second)
	require.ErrorIs(t, err, flechtwerk.ErrDuplicateTopic)
	require.ErrorContains(t, err, cl)
	require.Empty(t, readStable(t, c, out), "nothing of the batch committed")
	for _, r := range readStable(t, c, cl) {
		require.NotEqual(t, "other-key", string(r.Key), "a transform's record reached the changelog")
	}
	require.Empty(t, c.CommittedOffsets(t, app, in), "no offset committed")
}
