package task

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// quietTimers is a process.Stores processor whose timers fire without
// output.
type quietTimers struct{}

func (quietTimers) Validate() error { return nil }
func (quietTimers) Stateful() bool  { return false }
func (quietTimers) Prepare(r *kgo.Record) (process.Input, error) {
	return process.Input{Record: r, Key: r.Key}, nil
}
func (quietTimers) Process(context.Context, process.Input, []byte, bool) (process.Result, error) {
	return process.Result{}, errors.New("Process of a Stores processor")
}
func (quietTimers) Stores() []process.StoreSpec { return nil }
func (quietTimers) Timers() bool                { return true }
func (quietTimers) ProcessState(context.Context, process.Input, []byte, bool, process.State) (process.Result, error) {
	return process.Result{}, nil
}
func (quietTimers) Fire(context.Context, process.Timer, []byte, bool, process.State) (process.Result, error) {
	return process.Result{}, nil
}

// TestTickReportsMoreDue: of 10,005 event-time timers due by the stream
// time, a tick fires the bound (batch.DefaultMaxTimers) and reports the
// rest (Batch.MoreDue, TimersDue); a second tick fires the 5 left, and
// then none is due.
func TestTickReportsMoreDue(t *testing.T) {
	tk := testTask(t)
	tk.proc, tk.sp = quietTimers{}, quietTimers{}
	const n = batch.DefaultMaxTimers + 5
	ws := make([]store.Write, 0, n)
	for i := range n {
		ws = append(ws, store.Write{Key: store.TimerKey([]byte{'k', byte(i >> 8), byte(i)}, "t"),
			Value: store.TimerValue(uint8(process.EventTime), int64(1+i))})
	}
	require.NoError(t, tk.timers.Apply(ws))
	tk.stream = 2 * n

	due, err := tk.TimersDue()
	require.NoError(t, err)
	require.True(t, due)
	sem := make(chan struct{}, 4)
	tick := func() *Batch {
		b, err := tk.Tick(context.Background(), sem)
		require.NoError(t, err)
		for _, op := range b.timers { // as Add does
			tk.open.timers.put(op)
		}
		return b
	}
	b := tick()
	require.Equal(t, batch.DefaultMaxTimers, b.Fired())
	require.True(t, b.MoreDue())
	due, err = tk.TimersDue()
	require.NoError(t, err)
	require.True(t, due, "5 event-time timers still due")

	b = tick()
	require.Equal(t, 5, b.Fired())
	require.False(t, b.MoreDue())
	due, err = tk.TimersDue()
	require.NoError(t, err)
	require.False(t, due)
}

// TestTickFiresAtMostConfigMaxTimers: Config.MaxTimers bounds a tick as
// the default does: of 5 due timers, 3 fire, then the 2 left.
func TestTickFiresAtMostConfigMaxTimers(t *testing.T) {
	tk := testTask(t)
	tk.cfg.MaxTimers = 3
	tk.proc, tk.sp = quietTimers{}, quietTimers{}
	var ws []store.Write
	for i := range 5 {
		ws = append(ws, store.Write{Key: store.TimerKey([]byte{'k', byte(i)}, "t"),
			Value: store.TimerValue(uint8(process.EventTime), int64(1+i))})
	}
	require.NoError(t, tk.timers.Apply(ws))
	tk.stream = 10
	sem := make(chan struct{}, 4)
	for _, want := range []int{3, 2} {
		b, err := tk.Tick(context.Background(), sem)
		require.NoError(t, err)
		require.Equal(t, want, b.Fired())
		require.Equal(t, want == 3, b.MoreDue())
		for _, op := range b.timers {
			tk.open.timers.put(op)
		}
	}
}
