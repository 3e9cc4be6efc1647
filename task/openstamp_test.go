package task

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/task/process"
)

// slowHinter writes its key's state and a hint after a delay: a batch
// abandoned at BatchTimeout whose user code finishes after Close.
type slowHinter struct{ quietTimers }

func (slowHinter) Stateful() bool { return true }
func (slowHinter) ProcessState(context.Context, process.Input, []byte, bool, process.State) (process.Result, error) {
	time.Sleep(50 * time.Millisecond)
	return process.Result{Op: process.Put, State: []byte("v"), Stamp: process.Stamp{Kind: process.EventTime, At: 1},
		Timers: []process.TimerOp{{Timer: process.Timer{Key: []byte("k"), Name: "\x00ttl", Kind: process.EventTime, Due: 100}, Hint: true}}}, nil
}

// TestOpenStampAfterClose: a batch abandoned at its timeout, whose user
// code returns a hint after Close, reads the stamps it captured when it
// began, not the task's fields that Close replaces (run with -race).
func TestOpenStampAfterClose(t *testing.T) {
	tk := testTask(t)
	tk.proc, tk.sp = slowHinter{}, slowHinter{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = tk.Process(context.Background(), []*kgo.Record{{Key: []byte("k"), Value: []byte("x"), Timestamp: time.UnixMilli(1)}}, make(chan struct{}, 1))
	}()
	time.Sleep(20 * time.Millisecond) // the batch is in user code
	_ = tk.Close()
	wg.Wait()
}
