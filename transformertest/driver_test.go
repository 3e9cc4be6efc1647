package transformertest_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

var in = transformertest.StringInput

// counter counts records per state key and emits the count to "out".
func counter(opts ...transformer.Opt) *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send("out", rec.Key, []byte(strconv.Itoa(n)))
		return nil
	}, opts...)
}

// journal appends "topic:offset:value" of each record to its key's state and
// applies commands: a value "del" deletes the state, "fail" fails, "keep"
// changes nothing.
func journal() *transformer.Stage[string] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, s string, e *transformer.Emitter[string]) error {
		switch string(rec.Value) {
		case "del":
			e.DeleteState()
			return nil
		case "fail":
			return errors.New("boom")
		case "keep":
			return nil
		}
		if s != "" {
			s += ","
		}
		s += rec.Topic + ":" + strconv.FormatInt(rec.Offset, 10) + ":" + string(rec.Value)
		e.SetState(s)
		e.Send("out", rec.Key, []byte(s))
		return nil
	})
}

func newDriver(t *testing.T, proc transformertest.Stage, opts ...transformertest.Opt) *transformertest.Driver {
	t.Helper()
	d, err := transformertest.New(proc, opts...)
	require.NoError(t, err)
	return d
}

func values(outs []transformer.Output) []string {
	var vs []string
	for _, o := range outs {
		vs = append(vs, string(o.Key)+"="+string(o.Value))
	}
	return vs
}

func state[S any](t *testing.T, d *transformertest.Driver, p int32, key string) S {
	t.Helper()
	s, ok, err := transformertest.State[S](d, p, []byte(key))
	require.NoError(t, err)
	require.True(t, ok, "no state for %q in partition %d", key, p)
	return s
}

func TestCountAcrossBatches(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, counter())

	b, err := d.Process(ctx, in("t", 0, "a", ""), in("t", 0, "b", ""), in("t", 0, "a", ""), in("t", 1, "a", ""))
	require.NoError(t, err)
	require.Equal(t, 4, b.Records)
	require.Equal(t, []string{"a=1", "a=2", "b=1", "a=1"}, values(b.Outputs), "partition order, then key order of first record")
	require.Equal(t, map[string]map[int32]int64{"t": {0: 3, 1: 1}}, b.Offsets)

	_, err = d.Process(ctx, in("t", 0, "a", ""), in("t", 1, "a", ""))
	require.NoError(t, err)

	require.Equal(t, 3, state[int](t, d, 0, "a"))
	require.Equal(t, 1, state[int](t, d, 0, "b"))
	require.Equal(t, 2, state[int](t, d, 1, "a"), "state is per partition and key")
	raw, ok := d.RawState(0, []byte("a"))
	require.True(t, ok)
	require.Equal(t, "3", string(raw), "state is stored encoded by the codec (JSON)")
	_, ok, err = transformertest.State[int](d, 0, []byte("zzz"))
	require.NoError(t, err)
	require.False(t, ok)

	require.Equal(t, int64(4), d.Committed("t", 0))
	require.Equal(t, int64(2), d.Committed("t", 1))
	require.Equal(t, int64(0), d.Committed("t", 2))
	require.Len(t, d.Outputs(), 6)
	require.Len(t, d.Batches(), 2)
	require.Equal(t, [][]byte{[]byte("a"), []byte("b")}, d.StateKeys(0))
}

func TestOffsetsAndTopicOrder(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, journal(), transformertest.InputTopics("first", "second"))

	// Interleaved topics: the key's bucket runs all of "first" (offset
	// order), then all of "second".
	_, err := d.Process(ctx,
		in("second", 0, "k", "s0"), in("first", 0, "k", "f0"), in("second", 0, "k", "s1"), in("first", 0, "k", "f1"))
	require.NoError(t, err)
	require.Equal(t, "first:0:f0,first:1:f1,second:0:s0,second:1:s1", state[string](t, d, 0, "k"))

	_, err = d.Process(ctx, in("first", 0, "k", "f2"))
	require.NoError(t, err)
	require.Equal(t, "first:0:f0,first:1:f1,second:0:s0,second:1:s1,first:2:f2", state[string](t, d, 0, "k"),
		"offsets continue per topic and partition across batches")

	_, err = d.Process(ctx, in("third", 0, "k", "x"))
	require.ErrorContains(t, err, `not one of the input topics`)
	require.Equal(t, int64(0), d.Committed("third", 0))
}

func TestDefaultTopicOrderIsFirstAppearance(t *testing.T) {
	d := newDriver(t, journal())
	_, err := d.Process(context.Background(), in("b", 0, "k", "1"), in("a", 0, "k", "2"), in("b", 0, "k", "3"))
	require.NoError(t, err)
	require.Equal(t, "b:0:1,b:1:3,a:0:2", state[string](t, d, 0, "k"))
}

func TestChangelogDedupedToLastWritePerKey(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, journal())

	b, err := d.Process(ctx, in("t", 0, "d", "1"))
	require.NoError(t, err)
	require.Len(t, b.Changelog, 1)

	b, err = d.Process(ctx,
		in("t", 0, "a", "1"), in("t", 0, "a", "2"), in("t", 0, "b", "1"), in("t", 0, "b", "del"),
		in("t", 0, "c", "keep"), in("t", 0, "d", "del"), in("t", 0, "e", "del"), in("t", 1, "a", "x"))
	require.NoError(t, err)
	require.Equal(t, []transformertest.Write{
		{Partition: 0, Key: []byte("a"), Value: []byte(`"t:1:1,t:2:2"`)},
		{Partition: 0, Key: []byte("d"), Delete: true},
		{Partition: 1, Key: []byte("a"), Value: []byte(`"t:0:x"`)},
	}, b.Changelog, "one write per key: the last; a delete of state is a tombstone; "+
		"no write for a key left alone, nor for one without state before the batch and after it (b, e)")
	for _, k := range []string{"b", "c", "d", "e"} {
		_, ok := d.RawState(0, []byte(k))
		require.False(t, ok, k)
	}

	// Delete then put in one batch: the put wins, from an empty state.
	b, err = d.Process(ctx, in("t", 0, "a", "del"), in("t", 0, "a", "3"))
	require.NoError(t, err)
	require.Equal(t, []transformertest.Write{{Partition: 0, Key: []byte("a"), Value: []byte(`"t:9:3"`)}}, b.Changelog)
	require.Equal(t, "t:9:3", state[string](t, d, 0, "a"))

	require.Len(t, d.Changelog(), 5)
}

func TestFailedBatchChangesNothing(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, journal())
	_, err := d.Process(ctx, in("t", 0, "a", "1"), in("t", 1, "a", "1"))
	require.NoError(t, err)
	before := state[string](t, d, 0, "a")

	_, err = d.Process(ctx, in("t", 0, "a", "2"), in("t", 0, "b", "1"), in("t", 0, "a", "fail"), in("t", 1, "a", "2"))
	var pe *transformer.ProcessError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, transformer.ProcessError{Topic: "t", Partition: 0, Offset: 3, Key: []byte("a"), Err: pe.Err}, *pe)
	require.EqualError(t, pe.Err, "boom")

	require.Equal(t, before, state[string](t, d, 0, "a"))
	_, ok := d.RawState(0, []byte("b"))
	require.False(t, ok)
	require.Equal(t, "t:0:1", state[string](t, d, 1, "a"), "other partitions of the batch did not commit either")
	require.Len(t, d.Outputs(), 2)
	require.Len(t, d.Batches(), 1)
	require.Len(t, d.Changelog(), 2)
	require.Equal(t, int64(1), d.Committed("t", 0))
	require.Equal(t, int64(1), d.Committed("t", 1))

	// The replay gets the same offsets.
	_, err = d.Process(ctx, in("t", 0, "a", "2"))
	require.NoError(t, err)
	require.Equal(t, "t:0:1,t:1:2", state[string](t, d, 0, "a"))
}

func TestErrorsOfSeveralPartitionsAreJoined(t *testing.T) {
	d := newDriver(t, journal())
	_, err := d.Process(context.Background(), in("t", 0, "a", "fail"), in("t", 1, "a", "fail"), in("t", 2, "a", "ok"))
	require.Error(t, err)
	require.Contains(t, err.Error(), "partition 0 offset 0")
	require.Contains(t, err.Error(), "partition 1 offset 0")
	require.Empty(t, d.Outputs())
}

func TestEmptyStateKey(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, counter())
	_, err := d.Process(ctx, in("t", 0, "a", ""), in("t", 0, "", "no key"))
	var pe *transformer.ProcessError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, int64(1), pe.Offset)
	require.ErrorContains(t, err, "empty state key")
	require.Empty(t, d.Outputs())

	// A stateless transformer takes records without a key.
	sl := newDriver(t, transformer.Stateless(func(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
		out.Send("out", rec.Key, rec.Value)
		return nil
	}))
	_, err = sl.Process(ctx, in("t", 0, "", "v"))
	require.NoError(t, err)
	require.Equal(t, []transformer.Output{transformer.Output{Topic: "out", Value: []byte("v")}.ToPartition(0)}, sl.Outputs())
	require.Empty(t, sl.Changelog())
	require.Empty(t, sl.StateKeys(0))
}

func TestStateKeyOption(t *testing.T) {
	// State per customer: the value is "customer:amount".
	byCustomer := transformer.StateKey(func(rec *transformer.Record) []byte {
		c, _, _ := strings.Cut(string(rec.Value), ":")
		return []byte(c)
	})
	d := newDriver(t, counter(byCustomer))
	_, err := d.Process(context.Background(),
		in("orders", 0, "o1", "ann:5"), in("orders", 0, "o2", "bob:1"), in("orders", 0, "o3", "ann:2"))
	require.NoError(t, err)
	require.Equal(t, 2, state[int](t, d, 0, "ann"))
	require.Equal(t, 1, state[int](t, d, 0, "bob"))
	_, ok := d.RawState(0, []byte("o1"))
	require.False(t, ok)
	require.Equal(t, []string{"o1=1", "o3=2", "o2=1"}, values(d.Outputs()))
}

func TestCodec(t *testing.T) {
	last := transformer.New(func(_ context.Context, rec *transformer.Record, s []byte, e *transformer.Emitter[[]byte]) error {
		e.SetState(append(s, rec.Value...))
		return nil
	}, transformer.StateCodec(transformer.Bytes()))
	ctx := context.Background()

	d := newDriver(t, last)
	_, err := d.Process(ctx, in("t", 0, "k", "ab"), in("t", 0, "k", "cd"))
	require.NoError(t, err)
	require.Equal(t, []byte("abcd"), state[[]byte](t, d, 0, "k"))
	raw, _ := d.RawState(0, []byte("k"))
	require.Equal(t, "abcd", string(raw))

	_, _, err = transformertest.State[int](d, 0, []byte("k"))
	require.ErrorContains(t, err, "state is not of type int")
}

// aliasing is a codec that breaks the Decode contract: it returns its input
// as is, so a transform that scribbles over its state scribbles over the
// bytes the Driver handed it.
type aliasing struct{}

func (aliasing) Encode(b []byte) ([]byte, error) { return b, nil }
func (aliasing) Decode(b []byte) ([]byte, error) { return b, nil }

// mutator scribbles over the state it is given.
func mutator() *transformer.Stage[[]byte] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, state []byte, e *transformer.Emitter[[]byte]) error {
		for i := range state {
			state[i] = 'X'
		}
		if string(rec.Value) == "set" {
			e.SetState([]byte("v"))
			return nil
		}
		e.Send("out", rec.Key, []byte(strconv.FormatBool(e.HadState())))
		return nil
	}, transformer.StateCodec[[]byte](aliasing{}))
}

func TestProcessorGetsItsOwnCopyOfTheState(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, mutator())
	_, err := d.Process(ctx, in("t", 0, "k", "set"))
	require.NoError(t, err)
	_, err = d.Process(ctx, in("t", 0, "k", "get"), in("t", 0, "k", "get"))
	require.NoError(t, err)
	raw, ok := d.RawState(0, []byte("k"))
	require.True(t, ok)
	require.Equal(t, "v", string(raw))
	require.Equal(t, []string{"k=true", "k=true"}, values(d.Outputs()))
}

func TestInputsAndOutputsAreCopied(t *testing.T) {
	echo := transformer.Stateless(func(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
		out.Send("out", rec.Key, rec.Value)
		return nil
	})
	d := newDriver(t, echo)
	value := []byte("abc")
	b, err := d.Process(context.Background(), transformertest.Input{Topic: "t", Key: []byte("k"), Value: value})
	require.NoError(t, err)
	value[0] = 'X'
	require.Equal(t, "abc", string(d.Outputs()[0].Value))
	require.Equal(t, "abc", string(b.Outputs[0].Value))
}

func TestKeysRunConcurrently(t *testing.T) {
	// Each key waits until the other started: this finishes only when
	// buckets run concurrently, as in the runtime.
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() { started.Wait(); close(both) }()
	meet := transformer.New(func(ctx context.Context, rec *transformer.Record, _ int, e *transformer.Emitter[int]) error {
		started.Done()
		select {
		case <-both:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.SetState(1)
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := newDriver(t, meet)
	_, err := d.Process(ctx, in("t", 0, "a", ""), in("t", 0, "b", ""))
	require.NoError(t, err)
	require.Equal(t, 1, state[int](t, d, 0, "a"))
}

func TestCanceledContext(t *testing.T) {
	d := newDriver(t, counter(), transformertest.Concurrency(1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := d.Process(ctx, in("t", 0, "a", ""), in("t", 0, "b", ""))
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, d.Outputs())
	require.Equal(t, int64(0), d.Committed("t", 0))
}

func TestNewValidates(t *testing.T) {
	_, err := transformertest.New(transformer.New[int](nil))
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
	_, err = transformertest.New(counter(), transformertest.Concurrency(0), transformertest.InputTopics("a", "a"))
	require.ErrorContains(t, err, "Concurrency")
	require.ErrorContains(t, err, "repeated topic")
	_, err = transformertest.New(nil)
	require.Error(t, err)
}

func TestPanicIsAProcessErrorAndChangesNothing(t *testing.T) {
	boom := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		if string(rec.Value) == "panic" {
			panic("boom")
		}
		e.SetState(n + 1)
		return nil
	})
	d := newDriver(t, boom)
	_, err := d.Process(context.Background(), in("t", 0, "a", "1"), in("t", 0, "a", "panic"))
	var pe *transformer.ProcessError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, int64(1), pe.Offset)
	var panicErr *flechtwerk.PanicError
	require.ErrorAs(t, err, &panicErr)
	require.Equal(t, "boom", panicErr.Value)
	require.Empty(t, d.Changelog())
	require.Equal(t, int64(0), d.Committed("t", 0))
}

type notATransformer struct{}

func (notATransformer) Validate() error { return nil }

func TestNewTakesOnlyTransformers(t *testing.T) {
	_, err := transformertest.New(notATransformer{})
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
	_, err = transformertest.New(nil)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidTransformer)
}
