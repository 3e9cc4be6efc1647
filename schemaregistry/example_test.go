package schemaregistry_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/flechtwerk/flechtwerk/schemaregistry"
	"github.com/flechtwerk/flechtwerk/transformer"
)

type Order struct {
	Amount int64 `json:"amount"`
}

type Total struct {
	Customer string `avro:"customer"`
	Amount   int64  `avro:"amount"`
}

const totalSchema = `{"type":"record","name":"Total","fields":[
 {"name":"customer","type":"string"},{"name":"amount","type":"long"}]}`

// An Avro codec for a declared output topic's values and one for a
// stateful transformer's state.
func Example() {
	registry := srfake.New() // in production: the registry's URL
	defer registry.Close()
	cl, err := sr.NewClient(sr.URLs(registry.URL()))
	if err != nil {
		panic(err)
	}
	totals, err := schemaregistry.Avro[Total](cl, "totals", totalSchema)
	if err != nil {
		panic(err)
	}
	state, err := schemaregistry.Avro[Total](cl, "", totalSchema, schemaregistry.Subject("orders-app-state"))
	if err != nil {
		panic(err)
	}
	totalsOut := transformer.DeclareOutput[[]byte, Total]("totals", transformer.Bytes(), totals)
	stage := transformer.NewTyped(func(ctx context.Context, rec *transformer.TypedRecord[Order],
		t Total, out *transformer.Emitter[Total]) error {
		t.Customer = string(rec.Key)
		t.Amount += rec.Value.Amount
		out.SetState(t)
		return totalsOut.Send(out, rec.Key, t)
	}, transformer.StateCodec[Total](state), transformer.Produces(totalsOut))
	_ = stage // runner.NewTransformer(stage, ...) opens the state codec and the output's codecs

	// Outside a runner, open the codec yourself.
	ctx := context.Background()
	if err := totals.Open(ctx); err != nil {
		panic(err)
	}
	defer totals.Close(ctx)
	b, err := totals.Encode(Total{Customer: "c-1", Amount: 42})
	if err != nil {
		panic(err)
	}
	fmt.Printf("subject %s, schema id %d, header % x\n", totals.Subject(), totals.ID(), b[:5])
	t, err := totals.Decode(b)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", t)
	// Output:
	// subject totals-value, schema id 1, header 00 00 00 00 01
	// {Customer:c-1 Amount:42}
}
