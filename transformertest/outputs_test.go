package transformertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// The Driver's outputs carry the timestamp, headers and partition the
// runtime would produce them with.
func TestDriverOutputRecords(t *testing.T) {
	ts := time.UnixMilli(1_600_000_000_000)
	own := time.UnixMilli(1_700_000_000_000)
	counts := transformer.DeclareOutput("counts", transformer.String(), transformer.JSON[int](), transformer.CreateTopic(6, nil))
	byLen := transformer.DeclareOutput("bylen", transformer.String(), transformer.JSON[int](), transformer.CreateTopic(3, nil),
		transformer.PartitionBy(func(key []byte, n int32) int32 { return int32(len(key)) % n }))
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send("plain", rec.Key, rec.Value)
		e.Send("nokey", nil, rec.Value)
		e.SendRecord(transformer.Output{Topic: "plain", Key: rec.Key, Value: []byte("explicit"), Timestamp: own}.ToPartition(2))
		if err := counts.Send(e, string(rec.Key), n); err != nil {
			return err
		}
		return byLen.Send(e, string(rec.Key), n)
	}, transformer.InputHeaders(), transformer.Produces(counts, byLen))
	d, err := transformertest.New(st, transformertest.OutputPartitions("plain", 4))
	require.NoError(t, err)
	input := transformertest.Input{Topic: "in", Key: []byte("alpha"), Value: []byte("v"), Timestamp: ts,
		Headers: []transformer.Header{{Key: "trace", Value: []byte("t")}}}
	_, err = d.Process(context.Background(), input, input)
	require.NoError(t, err)

	outs := d.Outputs()
	require.Len(t, outs, 10)
	part := func(o transformer.Output) int32 {
		p, ok := o.Partition()
		require.True(t, ok, "a Driver's output has its partition")
		return p
	}
	for _, o := range outs {
		require.Equal(t, []transformer.Header{{Key: "trace", Value: []byte("t")}}, o.Headers, "%s: the input's headers", o.Topic)
		switch {
		case o.Topic == "plain" && string(o.Value) == "explicit":
			require.Equal(t, int32(2), part(o))
			require.Equal(t, own, o.Timestamp)
		case o.Topic == "plain":
			require.Equal(t, transformer.Murmur2([]byte("alpha"), 4), part(o), "murmur2 over OutputPartitions")
			require.Equal(t, ts, o.Timestamp, "the input's timestamp")
		case o.Topic == "nokey":
			require.Equal(t, int32(0), part(o), "one partition by default")
		case o.Topic == "counts":
			require.Equal(t, transformer.Murmur2([]byte("alpha"), 6), part(o), "over the declared count")
		case o.Topic == "bylen":
			require.Equal(t, int32(5%3), part(o), "PartitionBy")
		}
	}

	typed, err := transformertest.Outputs(d, counts)
	require.NoError(t, err)
	p := transformer.Murmur2([]byte("alpha"), 6)
	require.Equal(t, []transformertest.TypedOutput[string, int]{
		{Key: "alpha", Value: 1, Partition: p, Timestamp: ts, Headers: input.Headers},
		{Key: "alpha", Value: 2, Partition: p, Timestamp: ts, Headers: input.Headers},
	}, typed)
}

// An output to a partition its topic does not have fails the batch, as
// the runtime's transaction fails, and nothing of it is committed.
func TestDriverOutputPartitionOutOfRange(t *testing.T) {
	tests := []struct {
		name string
		opts []transformer.Opt
		send func(o *transformer.Outputs)
		want string
	}{
		{"explicit", nil, func(o *transformer.Outputs) {
			o.SendRecord(transformer.Output{Topic: "out"}.ToPartition(1))
		}, "topic out partition 1: the topic has 1 partitions"},
		{"partitioner", []transformer.Opt{transformer.Partitioner("out", func([]byte, int32) int32 { return 4 })}, func(o *transformer.Outputs) {
			o.Send("out", []byte("k"), nil)
		}, "topic out partition 4: the topic has 1 partitions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := transformer.Stateless(func(_ context.Context, _ *transformer.Record, o *transformer.Outputs) error {
				tc.send(o)
				return nil
			}, tc.opts...)
			d, err := transformertest.New(st)
			require.NoError(t, err)
			_, err = d.Process(context.Background(), in("in", 0, "k", "v"))
			require.ErrorIs(t, err, flechtwerk.ErrOutputPartition)
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, d.Outputs())
			require.Zero(t, d.Committed("in", 0))
		})
	}
}

func TestDriverOutputPartitionsOption(t *testing.T) {
	st := transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil })
	_, err := transformertest.New(st, transformertest.OutputPartitions("out", 0))
	require.ErrorContains(t, err, "OutputPartitions")
}

// Outputs reports an output of the topic that does not decode.
func TestDriverTypedOutputsDecodeError(t *testing.T) {
	ints := transformer.DeclareOutput("n", transformer.String(), transformer.JSON[int]())
	st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		o.Send("n", rec.Key, []byte("not json"))
		return ints.Send(o, string(rec.Key), len(rec.Value))
	}, transformer.Produces(ints))
	d, err := transformertest.New(st)
	require.NoError(t, err)
	_, err = d.Process(context.Background(), in("in", 0, "k", "v"))
	require.NoError(t, err)
	_, err = transformertest.Outputs(d, ints)
	require.ErrorContains(t, err, "output 0")
	require.ErrorContains(t, err, "decoding value of topic n")
}

// A panicking partitioner fails the batch with a coded error naming the
// topic, as it aborts the runtime's transaction, and changes nothing.
func TestDriverOutputPartitionerPanics(t *testing.T) {
	st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		o.Send("out", rec.Key, rec.Value)
		return nil
	}, transformer.Partitioner("out", func([]byte, int32) int32 { panic("boom") }))
	d, err := transformertest.New(st)
	require.NoError(t, err)
	_, err = d.Process(context.Background(), transformertest.StringInput("in", 0, "k", "v"))
	require.ErrorIs(t, err, flechtwerk.ErrOutputPartition)
	var pe *flechtwerk.PanicError
	require.ErrorAs(t, err, &pe)
	require.ErrorContains(t, err, "output to topic out")
	require.Empty(t, d.Outputs())
}
