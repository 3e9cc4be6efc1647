package transformertest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

const words = "wc-count-words-repartition"

func split() *transformer.Stage[transformer.None] {
	return transformer.Stateless(func(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
		for _, w := range strings.Fields(string(rec.Value)) {
			out.Send(words, []byte(w), []byte(w))
		}
		return nil
	})
}

func count() *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
		n++
		out.SetState(n)
		out.Send("counts", rec.Key, []byte(strconv.Itoa(n)))
		return nil
	})
}

func wordCount(t *testing.T) *transformertest.Pipeline {
	t.Helper()
	p := transformertest.NewPipeline()
	s, err := transformertest.New(split())
	require.NoError(t, err)
	c, err := transformertest.New(count())
	require.NoError(t, err)
	require.NoError(t, p.Add("split", s, "sentences"))
	require.NoError(t, p.Add("count", c, words))
	p.Partitions(words, 3)
	return p
}

func TestPipelineWordCount(t *testing.T) {
	p := wordCount(t)
	ctx := context.Background()
	require.NoError(t, p.Process(ctx,
		transformertest.StringInput("sentences", 0, "", "the fox and the dog"),
		transformertest.StringInput("sentences", 1, "", "the end")))
	require.NoError(t, p.Process(ctx, transformertest.StringInput("sentences", 0, "", "a fox")))

	got := map[string]int{}
	for _, o := range p.Outputs() {
		require.Equal(t, "counts", o.Topic)
		n, err := strconv.Atoi(string(o.Value))
		require.NoError(t, err)
		require.Equal(t, got[string(o.Key)]+1, n, "counts of %s run 1, 2, ...", o.Key)
		got[string(o.Key)] = n
	}
	require.Equal(t, map[string]int{"the": 3, "fox": 2, "and": 1, "dog": 1, "end": 1, "a": 1}, got)
	require.Len(t, p.Sent(words), 9, "every word went through the repartition topic")

	// Each word's state lives in the count task its key maps to, and
	// nowhere else.
	c := p.Stage("count")
	for w, n := range got {
		part := p.Partition(words, []byte(w))
		s, ok, err := transformertest.State[int](c, part, []byte(w))
		require.NoError(t, err)
		require.True(t, ok, "state of %s in partition %d", w, part)
		require.Equal(t, n, s)
		for other := range int32(3) {
			if other != part {
				_, ok := c.RawState(other, []byte(w))
				require.False(t, ok, "state of %s in partition %d", w, other)
			}
		}
	}
	require.Equal(t, int64(2), p.Stage("split").Committed("sentences", 0))
}

func TestPipelineErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("input no stage reads", func(t *testing.T) {
		err := wordCount(t).Process(ctx, transformertest.StringInput("nope", 0, "", "x"))
		require.ErrorContains(t, err, `"nope", which no stage reads`)
	})
	t.Run("stage error names the stage", func(t *testing.T) {
		p := transformertest.NewPipeline()
		boom := errors.New("boom")
		d, err := transformertest.New(transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error { return boom }))
		require.NoError(t, err)
		require.NoError(t, p.Add("bad", d, "in"))
		err = p.Process(ctx, transformertest.StringInput("in", 0, "k", "v"))
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, `stage "bad"`)
	})
	t.Run("cycle", func(t *testing.T) {
		p := transformertest.NewPipeline()
		d, err := transformertest.New(transformer.Stateless(func(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
			out.Send("loop", rec.Key, rec.Value)
			return nil
		}))
		require.NoError(t, err)
		require.NoError(t, p.Add("loop", d, "loop"))
		require.ErrorContains(t, p.Process(ctx, transformertest.StringInput("loop", 0, "k", "v")), "not settled")
	})
	t.Run("added twice", func(t *testing.T) {
		p := wordCount(t)
		d, err := transformertest.New(split())
		require.NoError(t, err)
		require.ErrorContains(t, p.Add("split", d, "x"), "added twice")
		require.ErrorContains(t, p.Add("other", d), "reads no topics")
	})
}

// TestPipelineAddAfterProcess: a stage added after Process is refused.
func TestPipelineAddAfterProcess(t *testing.T) {
	p := wordCount(t)
	require.NoError(t, p.Process(context.Background(), transformertest.StringInput("sentences", 0, "", "a b")))
	d, err := transformertest.New(count())
	require.NoError(t, err)
	require.ErrorContains(t, p.Add("late", d, words), "after Process")
	require.Nil(t, p.Stage("late"))
}

// TestPipelineErrorKeepsInFlight: a stage error leaves the records sent
// to it (committed by the stage before it) pending, as they stay in
// Kafka: the next Process delivers them first, also one without inputs.
func TestPipelineErrorKeepsInFlight(t *testing.T) {
	for _, retry := range []string{"with inputs", "without inputs"} {
		t.Run(retry, func(t *testing.T) {
			p := transformertest.NewPipeline()
			s, err := transformertest.New(split())
			require.NoError(t, err)
			fail := true
			var seen []string
			c, err := transformertest.New(transformer.New(func(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
				if fail {
					return errors.New("count down")
				}
				seen = append(seen, string(rec.Key))
				n++
				out.SetState(n)
				out.Send("counts", rec.Key, nil)
				return nil
			}), transformertest.Concurrency(1))
			require.NoError(t, err)
			require.NoError(t, p.Add("split", s, "sentences"))
			require.NoError(t, p.Add("count", c, words))
			ctx := context.Background()
			require.ErrorContains(t, p.Process(ctx, transformertest.StringInput("sentences", 0, "", "x y z")), "count down")
			require.Len(t, p.Sent(words), 3, "split committed its batch")
			require.Empty(t, p.Outputs())

			fail = false
			if retry == "with inputs" {
				require.NoError(t, p.Process(ctx, transformertest.StringInput("sentences", 0, "", "w")))
				require.Len(t, p.Sent(words), 4)
				require.Equal(t, []string{"x", "y", "z", "w"}, seen, "the pending words first")
			} else {
				require.NoError(t, p.Process(ctx))
				require.Equal(t, []string{"x", "y", "z"}, seen)
			}
			require.Len(t, p.Outputs(), len(seen), "nothing lost")
			require.NoError(t, p.Process(ctx))
			require.Len(t, p.Outputs(), len(seen), "nothing twice")
		})
	}
}

// TestPipelineRoutesByDriverPartition: an output goes to the reading
// stage at the partition its Driver reports (here an explicit one, not
// the one murmur2 of its key gives), with its timestamp and headers.
func TestPipelineRoutesByDriverPartition(t *testing.T) {
	ts := time.UnixMilli(1_700_000_000_000)
	hdr := []transformer.Header{{Key: "h", Value: []byte("v")}}
	send := transformer.Stateless(func(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
		out.SendRecord(transformer.Output{Topic: words, Key: rec.Key, Value: rec.Value, Timestamp: ts, Headers: hdr}.ToPartition(2))
		return nil
	})
	var got []*transformer.Record
	read := transformer.Stateless(func(_ context.Context, rec *transformer.Record, _ *transformer.Outputs) error {
		got = append(got, rec)
		return nil
	})
	s, err := transformertest.New(send)
	require.NoError(t, err)
	r, err := transformertest.New(read)
	require.NoError(t, err)
	p := transformertest.NewPipeline()
	require.NoError(t, p.Add("send", s, "in"))
	require.NoError(t, p.Add("read", r, words))
	p.Partitions(words, 3)
	key := "a"
	require.NotEqual(t, int32(2), p.Partition(words, []byte(key)), "the key's own partition is another")
	require.NoError(t, p.Process(context.Background(), transformertest.StringInput("in", 0, key, "v")))
	require.Len(t, got, 1)
	require.Equal(t, int32(2), got[0].Partition)
	require.True(t, ts.Equal(got[0].Timestamp), "timestamp %v", got[0].Timestamp)
	require.Equal(t, hdr, got[0].Headers)
}

// TestPipelinePartitionsDisagree: a Driver whose own partition count of a
// topic differs from the pipeline's is an error of Process.
func TestPipelinePartitionsDisagree(t *testing.T) {
	s, err := transformertest.New(split(), transformertest.OutputPartitions(words, 2))
	require.NoError(t, err)
	c, err := transformertest.New(count())
	require.NoError(t, err)
	p := transformertest.NewPipeline()
	require.NoError(t, p.Add("split", s, "sentences"))
	require.NoError(t, p.Add("count", c, words))
	p.Partitions(words, 3)
	err = p.Process(context.Background(), transformertest.StringInput("sentences", 0, "", "a"))
	require.ErrorContains(t, err, `stage "split"`)
	require.ErrorContains(t, err, "over 2 partitions, the pipeline over 3")
}

// A word count as two stages: split re-keys sentences into words through a
// repartition topic, count counts them.
func ExamplePipeline() {
	split := transformer.Stateless(func(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
		for _, w := range strings.Fields(string(rec.Value)) {
			out.Send("count-words-repartition", []byte(w), []byte(w))
		}
		return nil
	})
	counter := transformer.New(func(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
		n++
		out.SetState(n)
		out.Send("word-counts", rec.Key, []byte(strconv.Itoa(n)))
		return nil
	})
	s, _ := transformertest.New(split)
	c, _ := transformertest.New(counter)
	p := transformertest.NewPipeline()
	_ = p.Add("split", s, "sentences")
	_ = p.Add("count", c, "count-words-repartition")
	p.Partitions("count-words-repartition", 3)

	err := p.Process(context.Background(), transformertest.StringInput("sentences", 0, "", "the fox and the dog"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range p.Outputs() {
		fmt.Printf("%s=%s\n", o.Key, o.Value)
	}
	part := p.Partition("count-words-repartition", []byte("the"))
	n, _, _ := transformertest.State[int](p.Stage("count"), part, []byte("the"))
	fmt.Println("state of the:", n)
	// Unordered output:
	// the=1
	// the=2
	// fox=1
	// and=1
	// dog=1
	// state of the: 2
}
