package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/sink"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// order is the typed input of the invalid-record tests.
type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// orders is a typed (JSON) stateless transformer that emits "id:amount"
// and rejects a negative amount with transformer.Invalid.
func orders(out string) *transformer.Stage[transformer.None] {
	return transformer.StatelessTyped(func(_ context.Context, rec *transformer.TypedRecord[order], o *transformer.Outputs) error {
		if rec.Value.Amount < 0 {
			return transformer.Invalid(errors.New("negative amount"))
		}
		o.Send(out, rec.Key, []byte(rec.Value.ID+":"+strconv.Itoa(rec.Value.Amount)))
		return nil
	})
}

// orderInputs writes a good order, one that does not decode, one the
// transform rejects and another good one, to partition 0 of topic.
func orderInputs(t *testing.T, c *kafkatest.Cluster, topic string) {
	vals := []string{`{"id":"a","amount":1}`, `{not json`, `{"id":"c","amount":-5}`, `{"id":"d","amount":4}`}
	recs := make([]*kgo.Record, len(vals))
	for i, v := range vals {
		recs[i] = &kgo.Record{Topic: topic, Partition: 0, Key: []byte("k" + strconv.Itoa(i)), Value: []byte(v)}
	}
	c.Produce(t, recs...)
}

func orderValues(recs []*kgo.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Value))
	}
	return out
}

func TestInvalidRecordsSkipCommitsTheOffsetAndCounts(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("inv-in"), kafkatest.Name("inv-out"), kafkatest.Name("inv-app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	orderInputs(t, c, in)
	r, err := runner.NewTransformer(orders(out), runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
		runner.SessionTimeout(6*time.Second), runner.WithLogger(logger(t)), runner.InvalidRecords(runner.Skip))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	waitCommitted(t, c, app, in, 60*time.Second, done)
	require.Equal(t, map[int32]int64{0: 4}, c.CommittedOffsets(t, app, in), "lag 0: the skipped offsets committed")
	// The offsets can be visible before the markers of their transaction
	// are written on the output.
	require.Equal(t, []string{"a:1", "d:4"}, orderValues(readStable(t, c, out)))
	require.Equal(t, runner.Stats{InvalidSkipped: 2}, r.Stats())
}

func TestInvalidRecordsSubstituteEmitsTheSubstitute(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("inv-in"), kafkatest.Name("inv-out"), kafkatest.Name("inv-app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	orderInputs(t, c, in)
	var parts []string
	r, err := runner.NewTransformer(orders(out), runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
		runner.SessionTimeout(6*time.Second), runner.WithLogger(logger(t)),
		runner.InvalidRecords(runner.Substitute(func(e *transformer.InvalidRecordError) ([]byte, error) {
			parts = append(parts, string(e.Part)+"@"+strconv.FormatInt(e.Offset, 10))
			return []byte(`{"id":"sub` + strconv.FormatInt(e.Offset, 10) + `","amount":0}`), nil
		})))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	waitCommitted(t, c, app, in, 60*time.Second, done)
	// The offsets can be visible before the markers of their transaction
	// are written on the output.
	require.Equal(t, []string{"a:1", "sub1:0", "sub2:0", "d:4"}, orderValues(readStable(t, c, out)))
	require.Equal(t, []string{"value@1", "value@2"}, parts)
	require.Equal(t, runner.Stats{InvalidSubstituted: 2}, r.Stats())
}

func TestInvalidRecordsCrashNamesTheRecord(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("inv-in"), kafkatest.Name("inv-out"), kafkatest.Name("inv-app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	orderInputs(t, c, in)
	r, err := runner.NewTransformer(orders(out), runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
		runner.SessionTimeout(6*time.Second), runner.WithLogger(logger(t)), runner.MaxPollRecords(1))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = r.Run(ctx)
	var ie *transformer.InvalidRecordError
	require.ErrorAs(t, err, &ie)
	require.ErrorIs(t, err, transformer.ErrInvalidRecord)
	require.Equal(t, in, ie.Topic)
	require.Equal(t, int32(0), ie.Partition)
	require.Equal(t, int64(1), ie.Offset)
	require.Equal(t, transformer.PartValue, ie.Part)
	require.Equal(t, []byte(`{not json`), ie.Raw())
	require.Contains(t, err.Error(), "topic "+in+" partition 0 offset 1")
	// Nothing past the good record committed. The good record committed
	// only if its transaction ended before the invalid one was processed
	// (the crash aborts the open transaction, and with it every record of
	// the commit interval): its output is visible exactly when its offset
	// is. Run ended once every transaction of it ended, but their markers
	// (on the output and on the group's offsets) may not be written yet.
	outs := readStable(t, c, out)
	committed := stableOffsets(t, c, app, in)
	switch committed[0] {
	case 0:
		require.Empty(t, orderValues(outs), "nothing visible when no offset committed")
	case 1:
		require.Equal(t, []string{"a:1"}, orderValues(outs))
	default:
		t.Fatalf("committed offset %d passes the invalid record at offset 1", committed[0])
	}
}

func TestInvalidRecordsMissingDeadLetterTopicIsAStartupError(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("inv-in"), kafkatest.Name("inv-out"), kafkatest.Name("inv-app")
	c.CreateTopic(t, in, 1)
	orderInputs(t, c, in)
	dlq := kafkatest.Name("inv-missing-dlq")
	r, err := runner.NewTransformer(orders(out), runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
		runner.WithLogger(logger(t)), runner.InvalidRecords(runner.DeadLetter(dlq)))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, flechtwerk.ErrMissingTopic)
	require.Contains(t, err.Error(), dlq)
	require.Contains(t, err.Error(), "dead-letter")
	require.Empty(t, c.CommittedOffsets(t, app, in), "nothing processed")
}

func TestInvalidRecordsContradictingPoliciesAreACodedError(t *testing.T) {
	base := []runner.TransformerOpt{runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"), runner.InputTopics("in")}
	for name, opts := range map[string][]runner.TransformerOpt{
		"skip and crash":         {runner.InvalidRecords(runner.Skip), runner.InvalidRecords(runner.Crash)},
		"two dead-letter topics": {runner.InvalidRecords(runner.DeadLetter("a")), runner.InvalidRecords(runner.DeadLetter("b"))},
		"empty dead-letter":      {runner.InvalidRecords(runner.DeadLetter(""))},
		"nil substitute":         {runner.InvalidRecords(runner.Substitute(nil))},
	} {
		_, err := runner.NewTransformer(orders("out"), append(base, opts...)...)
		require.ErrorIs(t, err, flechtwerk.ErrInvalidRecordPolicy, name)
		require.Contains(t, err.Error(), "InvalidRecords", name)
	}
	_, err := runner.NewTransformer(orders("out"), append(base, runner.InvalidRecords(runner.DeadLetter("in")))...)
	require.ErrorIs(t, err, flechtwerk.ErrDuplicateTopic)
	_, err = runner.NewTransformer(orders("out"), append(base, runner.InvalidRecords(runner.Skip), runner.InvalidRecords(runner.Skip))...)
	require.NoError(t, err, "the same policy twice does not contradict")
}

// downCodec decodes JSON orders, except the value "down", for which it
// reports the service it needs as unreachable.
type downCodec struct{ transformer.Codec[order] }

func (downCodec) Decode(b []byte) (order, error) {
	if string(b) == "down" {
		return order{}, fmt.Errorf("fetch schema 7: %w: connection refused", flechtwerk.ErrUnavailable)
	}
	return transformer.JSON[order]().Decode(b)
}

// TestUnavailableCodecIsNotAnInvalidRecord: a value codec failing with
// ErrUnavailable is not the record's fault: under the Skip policy, Run
// ends at that record and commits nothing past it, for a transformer and
// for a sink.
func TestUnavailableCodecIsNotAnInvalidRecord(t *testing.T) {
	c := kafkatest.New(t)
	for _, kind := range []string{"transformer", "sink"} {
		t.Run(kind, func(t *testing.T) {
			in, out, app := kafkatest.Name("down-in"), kafkatest.Name("down-out"), kafkatest.Name("down-app")
			c.CreateTopic(t, in, 1)
			c.CreateTopic(t, out, 1)
			c.Produce(t, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("down")},
				&kgo.Record{Topic: in, Key: []byte("k"), Value: []byte(`{"id":"b","amount":2}`)})
			var r *runner.Runner
			var err error
			if kind == "transformer" {
				st := transformer.StatelessTyped(func(_ context.Context, rec *transformer.TypedRecord[order], o *transformer.Outputs) error {
					o.Send(out, rec.Key, []byte(rec.Value.ID))
					return nil
				}, transformer.InputCodec[order](downCodec{}))
				r, err = runner.NewTransformer(st, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
					runner.WithLogger(logger(t)), runner.InvalidRecords(runner.Skip))
			} else {
				st := sink.New[order](sink.WriteFunc[order](func(context.Context, []sink.Record[order]) error { return nil }),
					sink.ValueCodec[order](downCodec{}), sink.Delivery(sink.AtLeastOnce))
				r, err = runner.NewSink(st, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
					runner.WithLogger(logger(t)), runner.InvalidRecords(runner.Skip))
			}
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			err = r.Run(ctx)
			require.ErrorIs(t, err, flechtwerk.ErrUnavailable)
			require.NotErrorIs(t, err, flechtwerk.ErrInvalidRecord)
			require.NoError(t, ctx.Err(), "Run ended on its own")
			require.LessOrEqual(t, stableOffsets(t, c, app, in)[0], int64(0), "nothing past the record committed")
			require.Empty(t, readStable(t, c, out))
		})
	}
}

// badStateCodec encodes "bad" as a state that does not decode, with an
// error that marks it as a wire-format (invalid-record) error.
type badStateCodec struct{}

func (badStateCodec) Encode(s string) ([]byte, error) { return []byte(s), nil }

func (badStateCodec) Decode(b []byte) (string, error) {
	if string(b) == "bad" {
		return "", fmt.Errorf("no magic byte: %w", flechtwerk.ErrInvalidRecord)
	}
	return string(b), nil
}

// TestStateDecodeErrorIsNotAnInvalidRecord: a state that does not decode
// is not the input record's fault, even when the codec's error matches
// ErrInvalidRecord: under the Skip policy Run ends at the record that
// read it, and its offset is not committed.
func TestStateDecodeErrorIsNotAnInvalidRecord(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("bad-state-in"), kafkatest.Name("bad-state-out"), kafkatest.Name("bad-state-app")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("bad")},
		&kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("next")})
	calls := 0
	st := transformer.New(func(_ context.Context, rec *transformer.Record, s string, e *transformer.Emitter[string]) error {
		calls++
		e.SetState(string(rec.Value))
		e.Send(out, rec.Key, rec.Value)
		return nil
	}, transformer.StateCodec[string](badStateCodec{}))
	r, err := runner.NewTransformer(st, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.WithLogger(logger(t)), runner.InvalidRecords(runner.Skip))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorContains(t, err, `decoding state of key "k"`)
	require.NotErrorIs(t, err, flechtwerk.ErrInvalidRecord)
	require.NoError(t, ctx.Err(), "Run ended on its own")
	require.Equal(t, 1, calls, "the record that read the bad state was not transformed")
	require.Zero(t, r.Stats().InvalidSkipped)
	require.LessOrEqual(t, stableOffsets(t, c, app, in)[0], int64(0), "nothing committed: the batch aborted")
	require.Empty(t, readStable(t, c, out))
}
