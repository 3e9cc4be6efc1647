package transformertest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

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
