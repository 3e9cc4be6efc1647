package batch_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// TestHintOfAnotherTimerReachesResult: a process.Stores processor
// stamps its state and sets a hint on a timer of its own ("reminder"),
// which does not exist. The key's state was stamped by the last
// transaction (OpenStamp), which says nothing about "reminder": the hint
// must reach the Result (TimerOp.Hint: "set unless a timer ... due no
// later").
func TestHintOfAnotherTimerReachesResult(t *testing.T) {
	v := &memView{stores: map[int]map[string]string{0: {"k": "old"}}}
	sp := &scripted{onRecord: func(in process.Input, _ []byte, st process.State) (process.Result, error) {
		return process.Result{Op: process.Put, State: []byte("new"),
			Stamp:  process.Stamp{Kind: process.EventTime, At: st.StreamTime()},
			Timers: []process.TimerOp{{Timer: process.Timer{Key: in.Key, Name: "reminder", Kind: process.EventTime, Due: 500}, Hint: true}}}, nil
	}}
	p := storesParams(sp, v)
	p.OpenStamp = func([]byte) ([]byte, bool) {
		return stamp.Append(nil, process.Stamp{Kind: process.EventTime, At: 50}), true
	}
	res, err := batch.Run(context.Background(), p, []*kgo.Record{trec(0, "k", "1", 100)})
	require.NoError(t, err)
	var names []string
	for _, op := range res.Timers {
		names = append(names, op.Name)
	}
	require.Contains(t, names, "reminder", "the hint of a timer nothing set was dropped")
}
