package transform

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/task"
)

// TestSharedCommitReadsWantUnderLock: every task commits at the same
// tick, so one worker enters commitShared and finds the round while
// another reports its part into it: the round's membership is read under
// its lock (go test -race).
func TestSharedCommitReadsWantUnderLock(t *testing.T) {
	rn := &run{c: &config.Options{BatchTimeout: time.Second, TransactionTimeout: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, workers: map[int32]*worker{}, owners: map[int32]string{}}
	sh := &shared{rn: rn, lane: task.NewLane("g-shared", task.Config{ApplicationID: "g"}, nil)}
	rn.shared = sh
	for i := 0; i < 300; i++ {
		t1, t2 := new(task.Task), new(task.Task)
		r := &round{
			want:  map[*task.Task]bool{t1: true, t2: true},
			parts: map[*task.Task]*task.Prepared{},
			ready: make(chan struct{}),
			done:  make(chan struct{}),
		}
		sh.mu.Lock()
		sh.r = r
		sh.mu.Unlock()
		go sh.end(r)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // t1's worker reports (its part failed: no producer needed)
			defer wg.Done()
			<-start
			sh.report(r, t1, nil, errors.New("t1 failed"))
		}()
		go func() { // t2's worker: its commit is due at the same tick
			defer wg.Done()
			<-start
			w := &worker{rn: rn, t: t2}
			_ = w.commitShared()
		}()
		close(start)
		wg.Wait()
		<-r.done
	}
}

// TestSharedStaleRoundAfterUnseal: once every task of a round reported,
// the round is cleared before its transaction ends and the lane unseals,
// so a task that joins the next transaction (even while the round's end
// is held back) finds only the next round, never the ended one: its
// commit takes part in that one, and a worker that leaves reports there.
func TestSharedStaleRoundAfterUnseal(t *testing.T) {
	c := kafkatest.New(t)
	app := kafkatest.Name("app")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lane := task.NewLane(app+"-shared-test", task.Config{ApplicationID: app, TransactionTimeout: time.Minute,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}}, nil)
	defer lane.Close()
	rn := &run{c: &config.Options{BatchTimeout: 5 * time.Second, TransactionTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)}, workers: map[int32]*worker{}, owners: map[int32]string{}}
	sh := &shared{rn: rn, lane: lane}
	rn.shared = sh

	tA, tZ := new(task.Task), new(task.Task)
	err := lane.Join(ctx, tA)
	require.NoError(t, err)
	r := sh.seal() // tA's commit is due: the round of x1
	require.NotNil(t, r)

	// tA reports a failure (as sh.report does, under sh.mu), and the
	// test keeps sh.mu a moment: shared.end, which aborts x1, reaches
	// sh.mu only after that (a scheduling delay).
	sh.mu.Lock()
	delete(r.want, tA)
	r.failed = errors.New("tA failed")
	close(r.ready)
	// tZ joins the next transaction as soon as the lane is unsealed.
	joined := make(chan error, 1)
	go func() {
		err := lane.Join(ctx, tZ)
		joined <- err
	}()
	select {
	case err := <-joined:
		require.NoError(t, err)
		stale := sh.r == r && !r.want[tZ]
		sh.mu.Unlock()
		// With sh.r stale, tZ's commitShared (seal returns r) fails with
		// "in no shared transaction to commit" (non-transient: Run
		// ends), and tZ's leaveShared reports into r, which drops it.
		require.False(t, stale, "x2 open with tZ in it while sh.r is still the ended round")
	case <-time.After(time.Second):
		sh.mu.Unlock() // the lane stays sealed until the round is cleared
		require.NoError(t, <-joined)
	}
	<-r.done
	r2 := sh.seal()
	require.NotNil(t, r2)
	require.NotSame(t, r, r2)
	require.Same(t, r2, sh.roundOf(tZ), "tZ's commit finds the round of x2")
	sh.report(r2, tZ, nil, errors.New("done"))
	<-r2.done
}
