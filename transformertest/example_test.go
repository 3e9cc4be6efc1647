package transformertest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// A word count tested without Kafka: words keyed by themselves, one count
// per word, two batches.
func Example() {
	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
		n++
		out.SetState(n)
		out.Send("word-counts", rec.Key, []byte(strconv.Itoa(n)))
		return nil
	})
	d, err := transformertest.New(counter)
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx := context.Background()
	for _, sentence := range []string{"the fox and the dog", "the end"} {
		var batch []transformertest.Input
		for _, w := range strings.Fields(sentence) {
			batch = append(batch, transformertest.StringInput("words", 0, w, w))
		}
		if _, err := d.Process(ctx, batch...); err != nil {
			fmt.Println(err)
			return
		}
	}

	for _, o := range d.Outputs() {
		fmt.Printf("%s %s=%s\n", o.Topic, o.Key, o.Value)
	}
	n, _, _ := transformertest.State[int](d, 0, []byte("the"))
	fmt.Println("state of the:", n)
	fmt.Println("changelog writes per batch:", len(d.Batches()[0].Changelog), len(d.Batches()[1].Changelog))
	fmt.Println("committed offset:", d.Committed("words", 0))
	// Output:
	// word-counts the=1
	// word-counts the=2
	// word-counts fox=1
	// word-counts and=1
	// word-counts dog=1
	// word-counts the=3
	// word-counts end=1
	// state of the: 3
	// changelog writes per batch: 4 2
	// committed offset: 7
}
