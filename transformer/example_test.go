package transformer_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// A stateful transformer with a struct state, stored with the default JSON
// codec: the running total and count of the amounts per account.
func ExampleNew() {
	type total struct {
		Count int
		Sum   int
	}
	totals := transformer.New(func(ctx context.Context, rec *transformer.Record, t total, out *transformer.Emitter[total]) error {
		amount, err := strconv.Atoi(string(rec.Value))
		if err != nil {
			return fmt.Errorf("amount %q: %w", rec.Value, err) // ends Run; nothing of the batch commits
		}
		t.Count++
		t.Sum += amount
		out.SetState(t)
		out.Send("totals", rec.Key, []byte(strconv.Itoa(t.Sum)))
		return nil
	})

	d, _ := transformertest.New(totals)
	ctx := context.Background()
	_, err := d.Process(ctx,
		transformertest.StringInput("payments", 0, "alice", "30"),
		transformertest.StringInput("payments", 0, "bob", "5"),
		transformertest.StringInput("payments", 0, "alice", "12"))
	fmt.Println("batch 1:", err)
	_, err = d.Process(ctx, transformertest.StringInput("payments", 0, "bob", "five"))
	fmt.Println("batch 2:", err)

	for _, o := range d.Outputs() {
		fmt.Printf("%s %s=%s\n", o.Topic, o.Key, o.Value)
	}
	t, _, _ := transformertest.State[total](d, 0, []byte("alice"))
	raw, _ := d.RawState(0, []byte("alice"))
	fmt.Printf("alice: %+v stored as %s\n", t, raw)
	// Output:
	// batch 1: <nil>
	// batch 2: transformer: transform failed at topic payments partition 0 offset 3 (key "bob"): amount "five": strconv.Atoi: parsing "five": invalid syntax; batch aborted, offsets not advanced
	// totals alice=30
	// totals alice=42
	// totals bob=5
	// alice: {Count:2 Sum:42} stored as {"Count":2,"Sum":42}
}

// StateKey keeps state per customer while the records are keyed by order:
// the customer is the part of the value before the colon.
func ExampleStateKey() {
	byCustomer := transformer.StateKey(func(rec *transformer.Record) []byte {
		customer, _, _ := bytes.Cut(rec.Value, []byte(":"))
		return customer
	})
	orders := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
		n++
		out.SetState(n)
		out.Send("orders-numbered", rec.Key, fmt.Appendf(nil, "%s is order %d of its customer", rec.Key, n))
		return nil
	}, byCustomer)

	d, _ := transformertest.New(orders)
	_, _ = d.Process(context.Background(),
		transformertest.StringInput("orders", 0, "o-1", "ann:book"),
		transformertest.StringInput("orders", 0, "o-2", "bob:pen"),
		transformertest.StringInput("orders", 0, "o-3", "ann:lamp"))

	for _, o := range d.Outputs() {
		fmt.Println(string(o.Value))
	}
	for _, k := range d.StateKeys(0) {
		n, _, _ := transformertest.State[int](d, 0, k)
		fmt.Printf("state %s=%d\n", k, n)
	}
	// Output:
	// o-1 is order 1 of its customer
	// o-3 is order 2 of its customer
	// o-2 is order 1 of its customer
	// state ann=2
	// state bob=1
}

// The Bytes codec stores a []byte state as is: here the last three values
// seen per key, newline separated. A delete removes the state (a tombstone
// in the changelog).
func ExampleBytes() {
	lastThree := transformer.New(func(ctx context.Context, rec *transformer.Record, s []byte, out *transformer.Emitter[[]byte]) error {
		if string(rec.Value) == "reset" {
			out.DeleteState()
			return nil
		}
		lines := append(strings.Split(string(s), "\n"), string(rec.Value))
		if !out.HadState() {
			lines = lines[1:]
		}
		lines = lines[max(0, len(lines)-3):]
		out.SetState([]byte(strings.Join(lines, "\n")))
		return nil
	}, transformer.StateCodec(transformer.Bytes()))

	d, _ := transformertest.New(lastThree)
	ctx := context.Background()
	for _, v := range []string{"a", "b", "c", "d"} {
		_, _ = d.Process(ctx, transformertest.StringInput("events", 0, "k", v))
	}
	raw, _ := d.RawState(0, []byte("k"))
	fmt.Printf("stored: %q\n", raw)

	_, _ = d.Process(ctx, transformertest.StringInput("events", 0, "k", "reset"))
	_, found := d.RawState(0, []byte("k"))
	fmt.Println("after reset found:", found)
	w := d.Changelog()[len(d.Changelog())-1]
	fmt.Println("last changelog write is a tombstone:", w.Delete)
	// Output:
	// stored: "b\nc\nd"
	// after reset found: false
	// last changelog write is a tombstone: true
}

// A stateless transformer keeps no state and opens no store: here it drops
// empty values and upper-cases the rest.
func ExampleStateless() {
	upper := transformer.Stateless(func(ctx context.Context, rec *transformer.Record, out *transformer.Outputs) error {
		if len(rec.Value) == 0 {
			return nil
		}
		out.Send("upper", rec.Key, bytes.ToUpper(rec.Value))
		return nil
	})

	d, _ := transformertest.New(upper)
	_, _ = d.Process(context.Background(),
		transformertest.StringInput("in", 0, "", "hello"),
		transformertest.StringInput("in", 1, "", ""),
		transformertest.StringInput("in", 1, "", "world"))
	for _, o := range d.Outputs() {
		fmt.Printf("%s %s\n", o.Topic, o.Value)
	}
	fmt.Println("changelog writes:", len(d.Changelog()))
	// Output:
	// upper HELLO
	// upper WORLD
	// changelog writes: 0
}

// rates is a user type implementing transformer.StatelessTransformer: it
// converts amounts with rates it loads when the runner opens the stage
// (flechtwerk.Lifecycle), as a stage that owns an HTTP client or a
// connection pool would.
type rates struct{ perEUR map[string]float64 }

func (r *rates) Open(context.Context) error {
	r.perEUR = map[string]float64{"USD": 1.25} // e.g. fetched from a rates API
	return nil
}

func (r *rates) Close(context.Context) error { return nil }

func (r *rates) Transform(_ context.Context, rec *transformer.Record, out *transformer.Outputs) error {
	eur, err := strconv.ParseFloat(string(rec.Value), 64)
	if err != nil {
		return transformer.Invalid(err)
	}
	out.Send("usd", rec.Key, []byte(strconv.FormatFloat(eur*r.perEUR["USD"], 'f', 2, 64)))
	return nil
}

// A stage built from a user type: StatelessFrom takes the interface,
// Stateless a function. runner.Run calls Open before the first record and
// Close after the last; a test calls them itself.
func ExampleStatelessFrom() {
	r := &rates{}
	_ = r.Open(context.Background())
	defer r.Close(context.Background())

	d, _ := transformertest.New(transformer.StatelessFrom(r))
	_, err := d.Process(context.Background(), transformertest.StringInput("eur", 0, "order-1", "8"))
	fmt.Println(err)
	for _, o := range d.Outputs() {
		fmt.Printf("%s %s=%s\n", o.Topic, o.Key, o.Value)
	}
	// Output:
	// <nil>
	// usd order-1=10.00
}
