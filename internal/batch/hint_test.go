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
// transaction (Stamped.Recent), which says nothing about "reminder": the hint
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
	p.StampedState = func([]byte) (batch.Stamped, error) {
		return batch.Stamped{Value: []byte("old"), Found: true, Stamp: stamp.Append(nil, process.Stamp{Kind: process.EventTime, At: 50}), Recent: true}, nil
	}
	res, err := batch.Run(context.Background(), p, []*kgo.Record{trec(0, "k", "1", 100)})
	require.NoError(t, err)
	var names []string
	for _, op := range res.Timers {
		names = append(names, op.Name)
	}
	require.Contains(t, names, "reminder", "the hint of a timer nothing set was dropped")
}

// TestHintOfOlderStampReachesResult: a stamp that neither the open nor
// the last transaction wrote (Stamped.Recent false) is not trusted to
// have set its timers: a hint it covers still reaches the Result.
func TestHintOfOlderStampReachesResult(t *testing.T) {
	for _, recent := range []bool{false, true} {
		v := &memView{stores: map[int]map[string]string{0: {"k": "old"}}}
		sp := &scripted{onRecord: func(in process.Input, _ []byte, st process.State) (process.Result, error) {
			return process.Result{Op: process.Put, State: []byte("new"),
				Stamp:  process.Stamp{Kind: process.EventTime, At: st.StreamTime()},
				Timers: []process.TimerOp{{Timer: process.Timer{Key: in.Key, Name: "\x00ttl", Kind: process.EventTime, Due: 500}, Hint: true}}}, nil
		}}
		p := storesParams(sp, v)
		p.StampedState = func([]byte) (batch.Stamped, error) {
			return batch.Stamped{Value: []byte("old"), Found: true, Stamp: stamp.Append(nil, process.Stamp{Kind: process.EventTime, At: 50}), Recent: recent}, nil
		}
		res, err := batch.Run(context.Background(), p, []*kgo.Record{trec(0, "k", "1", 100)})
		require.NoError(t, err)
		if recent {
			require.Empty(t, res.Timers, "a hint the last transaction's stamp covers was passed on")
		} else {
			require.Len(t, res.Timers, 1, "a hint only an older stamp covers was dropped")
		}
	}
}
