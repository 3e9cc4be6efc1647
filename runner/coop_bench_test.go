package runner

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// arrivals keeps, per task, when it committed.
type arrivals struct {
	mu sync.Mutex
	at map[int32][]time.Time
}

func (a *arrivals) committed(n int32) {
	now := time.Now()
	a.mu.Lock()
	a.at[n] = append(a.at[n], now)
	a.mu.Unlock()
}

// maxGap returns the longest time without an output of any of tasks
// within [from, to].
func (a *arrivals) maxGap(tasks []int32, from, to time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var worst time.Duration
	for _, n := range tasks {
		last := from
		for _, at := range a.at[n] {
			if at.Before(from) || at.After(to) {
				continue
			}
			worst = max(worst, at.Sub(last))
			last = at
		}
		worst = max(worst, to.Sub(last))
	}
	return worst
}

// BenchmarkJoinPause measures how long the tasks that do not move stop
// committing when an instance joins: two instances run 12 tasks over
// continuously produced input, a third joins; the figure is the longest
// gap between two commits of a task that stays with its instance, from
// the join
// until the group is stable again plus a second, next to the same gap
// over the 5s before the join. The eager range balancer (every task
// revoked and started again) is the baseline.
//
//	go test ./runner/ -run '^$' -bench JoinPause -benchtime 1x
func BenchmarkJoinPause(b *testing.B) {
	for _, eager := range []bool{false, true} {
		name := "cooperative"
		if eager {
			name = "eager"
		}
		b.Run(name, func(b *testing.B) {
			var before, join time.Duration
			for range b.N {
				bf, jn := joinPause(b, eager)
				before, join = before+bf, join+jn
			}
			b.ReportMetric(float64(before.Milliseconds())/float64(b.N), "gap-before-ms")
			b.ReportMetric(float64(join.Milliseconds())/float64(b.N), "gap-join-ms")
			b.ReportMetric(float64(join)/float64(before), "join/before")
		})
	}
}

func joinPause(b *testing.B, eager bool) (before, join time.Duration) {
	return groupChangePause(b, eager, false)
}

// BenchmarkLeavePause is BenchmarkJoinPause the other way round: three
// instances run 12 tasks, one leaves the group (a graceful stop), and the
// other two take its tasks over beside their own; the figure is the
// longest gap between two commits of a task the two kept, from the leave
// until the group is stable again plus a second, next to the same gap
// over the 5s before.
//
//	go test ./runner/ -run '^$' -bench LeavePause -benchtime 1x
func BenchmarkLeavePause(b *testing.B) {
	for _, eager := range []bool{false, true} {
		name := "cooperative"
		if eager {
			name = "eager"
		}
		b.Run(name, func(b *testing.B) {
			var before, leave time.Duration
			for range b.N {
				bf, lv := groupChangePause(b, eager, true)
				before, leave = before+bf, leave+lv
			}
			b.ReportMetric(float64(before.Milliseconds())/float64(b.N), "gap-before-ms")
			b.ReportMetric(float64(leave.Milliseconds())/float64(b.N), "gap-leave-ms")
			b.ReportMetric(float64(leave)/float64(before), "leave/before")
		})
	}
}

// groupChangePause runs JoinPause (a third instance joins two) or, with
// leave, LeavePause (one of three leaves).
func groupChangePause(b *testing.B, eager, leave bool) (before, change time.Duration) {
	c := kafkatest.New(b)
	in, out, app := kafkatest.Name("pause-in"), kafkatest.Name("pause-out"), kafkatest.Name("pause")
	const partitions = 12
	c.CreateTopic(b, in, partitions)
	c.CreateTopic(b, out, partitions)
	f := feed(b, c, in, partitions)
	a := &arrivals{at: map[int32][]time.Time{}}

	inst := map[string]*instance{}
	start := func(name string) {
		r, err := NewTransformer(echoCount(out), append(coopOpts(c.Brokers, app, in, b.TempDir(), name), WithKafkaOpts(c.Opts()...))...)
		if err != nil {
			b.Fatal(err)
		}
		hooks := transform.Hooks{Eager: eager, Committed: a.committed}
		ctx, cancel := context.WithCancel(context.Background())
		i := &instance{r: r, cancel: cancel, done: make(chan error, 1)}
		go func() { i.done <- r.run(ctx, hooks) }()
		inst[name] = i
	}
	defer func() {
		for _, i := range inst {
			i.cancel()
			<-i.done
		}
	}()
	start("a")
	start("b")
	first, then := map[string]int{"a": 6, "b": 6}, map[string]int{"a": 4, "b": 4, "c": 4}
	if leave {
		start("c")
		first, then = then, first
	}
	s0 := groupTasks(b, c, app, first, inst)
	time.Sleep(5 * time.Second) // settle, then measure 5s before the change
	changed := time.Now()
	if leave {
		i := inst["c"]
		delete(inst, "c")
		i.cancel()
		if err := <-i.done; err != nil {
			b.Fatal(err)
		}
	} else {
		start("c")
	}
	s1 := groupTasks(b, c, app, then, inst)
	stable := time.Now()
	time.Sleep(time.Second)
	var stayed []int32
	for _, name := range []string{"a", "b"} {
		for _, n := range s0[name] {
			if slices.Contains(s1[name], n) {
				stayed = append(stayed, n)
			}
		}
	}
	close(f.stop)
	if err := <-f.done; err != nil {
		b.Fatal(err)
	}
	before = a.maxGap(stayed, changed.Add(-5*time.Second), changed)
	change = a.maxGap(stayed, changed, stable.Add(time.Second))
	b.Logf("%s %s: to stable %v; tasks that stayed %v: longest gap between commits %v before, %v around it",
		map[bool]string{false: "cooperative", true: "eager"}[eager], map[bool]string{false: "join", true: "leave"}[leave],
		stable.Sub(changed).Round(time.Millisecond), stayed, before.Round(time.Millisecond), change.Round(time.Millisecond))
	return before, change
}
