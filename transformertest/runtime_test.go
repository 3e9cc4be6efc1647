package transformertest_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// TestMatchesRuntime runs one transformer through the runner on a broker and
// through a Driver, and requires the same outputs per key, in order, and the
// same final state bytes per partition and key (read from the changelog).
func TestMatchesRuntime(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	const partitions, n, keys = 2, 300, 12
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)

	// Values "del" delete the key's state; "keep" leaves it.
	proc := transformer.New(func(_ context.Context, rec *transformer.Record, s []int64, e *transformer.Emitter[[]int64]) error {
		switch string(rec.Value) {
		case "del":
			e.DeleteState()
		case "keep":
		default:
			s = append(s, rec.Offset)
			e.SetState(s)
		}
		e.Send(out, rec.Key, fmt.Appendf(nil, "%d:%v:%v", rec.Offset, e.HadState(), s))
		return nil
	})

	var recs []*kgo.Record
	var inputs []transformertest.Input
	for i := range n {
		k := i % keys
		v := "add"
		switch {
		case i%11 == 0:
			v = "del"
		case i%7 == 0:
			v = "keep"
		}
		p := int32(k % partitions)
		key := fmt.Sprintf("k%d", k)
		recs = append(recs, &kgo.Record{Topic: in, Partition: p, Key: []byte(key), Value: []byte(v)})
		inputs = append(inputs, transformertest.StringInput(in, p, key, v))
	}
	c.Produce(t, recs...)

	rn, err := runner.NewTransformer(proc, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(41), runner.SessionTimeout(6*time.Second),
		runner.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rn.Run(ctx) }()
	ends := c.EndOffsets(t, in)
	kafkatest.WaitFor(t, 60*time.Second, "lag 0", func() bool {
		select {
		case err := <-done:
			t.Fatalf("runner ended: %v", err)
		default:
		}
		got := c.CommittedOffsets(t, app, in)
		for p, end := range ends {
			if got[p] != end {
				return false
			}
		}
		return true
	})
	cancel()
	require.NoError(t, <-done)

	// The offsets can be visible before the markers of their transaction
	// are written on the output and the changelog.
	c.WaitSettled(t, out)
	c.WaitSettled(t, rn.Changelog())
	runtimeOuts := map[string][]string{}
	for _, r := range c.ReadCommitted(t, out) {
		runtimeOuts[string(r.Key)] = append(runtimeOuts[string(r.Key)], string(r.Value))
	}
	runtimeState := map[string]string{}
	for _, r := range c.ReadCommitted(t, rn.Changelog()) {
		id := fmt.Sprintf("%d/%s", r.Partition, r.Key)
		if r.Value == nil {
			delete(runtimeState, id)
		} else {
			runtimeState[id] = string(r.Value)
		}
	}

	// The Driver, in batches of a different size: results must not depend
	// on batch boundaries.
	d, err := transformertest.New(proc)
	require.NoError(t, err)
	for len(inputs) > 0 {
		m := min(len(inputs), 29)
		_, err := d.Process(context.Background(), inputs[:m]...)
		require.NoError(t, err)
		inputs = inputs[m:]
	}
	driverOuts := map[string][]string{}
	for _, o := range d.Outputs() {
		driverOuts[string(o.Key)] = append(driverOuts[string(o.Key)], string(o.Value))
	}
	driverState := map[string]string{}
	for p := range int32(partitions) {
		for _, k := range d.StateKeys(p) {
			v, _ := d.RawState(p, k)
			driverState[fmt.Sprintf("%d/%s", p, k)] = string(v)
		}
	}

	require.Len(t, runtimeOuts, keys)
	require.Equal(t, runtimeOuts, driverOuts)
	require.NotEmpty(t, runtimeState)
	require.Equal(t, runtimeState, driverState)
}
