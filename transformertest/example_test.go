package transformertest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

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

// Typed outputs tested without Kafka: a declared output topic of string
// keys and int values over 4 partitions, decoded with Outputs, each with
// the partition the runtime would send it to and the input's timestamp.
func ExampleOutputs() {
	counts := transformer.DeclareOutput("word-counts", transformer.String(), transformer.JSON[int](),
		transformer.CreateTopic(4, nil))
	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
		n++
		out.SetState(n)
		return counts.Send(out, string(rec.Key), n)
	}, transformer.Produces(counts))
	d, err := transformertest.New(counter)
	if err != nil {
		fmt.Println(err)
		return
	}
	var batch []transformertest.Input
	for i, w := range strings.Fields("the fox and the dog") {
		in := transformertest.StringInput("words", 0, w, w)
		in.Timestamp = time.UnixMilli(int64(1000 + i)).UTC()
		batch = append(batch, in)
	}
	if _, err := d.Process(context.Background(), batch...); err != nil {
		fmt.Println(err)
		return
	}
	outs, err := transformertest.Outputs(d, counts)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range outs {
		fmt.Printf("%s=%d partition %d at %d\n", o.Key, o.Value, o.Partition, o.Timestamp.UnixMilli())
	}
	// Output:
	// the=1 partition 3 at 1000
	// the=2 partition 3 at 1003
	// fox=1 partition 0 at 1001
	// and=1 partition 3 at 1002
	// dog=1 partition 0 at 1004
}

// A payment timeout: an order not paid within 15 minutes of wall-clock
// time is cancelled, driven by the Driver's clock.
func Example_timers() {
	type order struct{ Paid bool }
	st := transformer.New(func(ctx context.Context, rec *transformer.Record, o order, out *transformer.Emitter[order]) error {
		if string(rec.Value) == "paid" {
			out.DeleteState()
			out.CancelTimer("timeout")
			return nil
		}
		out.SetState(o)
		out.SetWallTimer("timeout", out.Now().Add(15*time.Minute))
		return nil
	}, transformer.OnTimer(func(ctx context.Context, t transformer.Timer, o order, out *transformer.Emitter[order]) error {
		out.DeleteState()
		out.Send("cancelled", t.Key, []byte("unpaid"))
		return nil
	}))
	d, err := transformertest.New(st)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	d.SetNow(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
	if _, err := d.Process(ctx,
		transformertest.StringInput("orders", 0, "o1", "placed"),
		transformertest.StringInput("orders", 0, "o2", "placed")); err != nil {
		fmt.Println(err)
		return
	}
	d.Advance(10 * time.Minute)
	if _, err := d.Process(ctx, transformertest.StringInput("orders", 0, "o2", "paid")); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("pending for o1:", d.Timers(0, []byte("o1"))[0].Due.UTC().Format("15:04"))
	d.Advance(5 * time.Minute)
	b, err := d.Tick(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range b.Outputs {
		fmt.Printf("%s %s=%s at %s\n", o.Topic, o.Key, o.Value, o.Timestamp.UTC().Format("15:04"))
	}
	fmt.Println("timers left:", len(d.Timers(0, []byte("o1")))+len(d.Timers(0, []byte("o2"))))
	// Output:
	// pending for o1: 09:15
	// cancelled o1=unpaid at 09:15
	// timers left: 0
}
