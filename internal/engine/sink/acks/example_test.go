package acks_test

import (
	"fmt"

	"github.com/flechtwerk/flechtwerk/internal/engine/sink/acks"
)

func ExampleTracker() {
	tr, err := acks.New()
	if err != nil {
		panic(err)
	}
	tp := acks.TopicPartition{Topic: "orders", Partition: 0}
	tr.Assign(tp, 10) // the group had committed 10

	// One poll: records at 10, 11 and 13 (12 is a transaction marker),
	// and the fetch position is 15 (14 is the commit marker).
	a, _ := tr.Register(tp, 10)
	b, _ := tr.Register(tp, 11)
	c, _ := tr.Register(tp, 13)
	_ = tr.Advance(tp, 15)

	_ = tr.FanOut(b, 2) // 11 became two rows
	_ = tr.Done(a)
	_ = tr.Done(b)
	_ = tr.Done(c)
	fmt.Println(tr.Changed()) // 11 still has a row to write

	_ = tr.Done(b)
	fmt.Println(tr.Changed())
	fmt.Println(tr.Changed()) // nothing moved
	// Output:
	// [{orders 0 11}]
	// [{orders 0 15}]
	// []
}
