package runner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// syncLog is a log destination safe for concurrent writes.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type standbyRun struct {
	r      *Runner
	log    *syncLog
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned err
	err    error
	dir    string // the state directory
}

func startStandbyRunner(t *testing.T, c *kafkatest.Cluster, app, in, out string) *standbyRun {
	t.Helper()
	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send(out, rec.Key, []byte(strconv.Itoa(n)))
		return nil
	})
	l := &syncLog{}
	r, err := NewTransformer(counter, SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in),
		StateDir(t.TempDir()), StandbyReplicas(1), SessionTimeout(3*time.Second),
		WithConsumerOpts(kgo.HeartbeatInterval(200*time.Millisecond)),
		WithLogger(slog.New(slog.NewTextHandler(l, nil))))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &standbyRun{r: r, log: l, cancel: cancel, done: make(chan struct{})}
	go func() {
		s.err = r.Run(ctx)
		close(s.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// offsets returns the run's changelogOffsets and its standby tasks.
func (s *standbyRun) offsets() (map[int32]int64, []int32) {
	q := s.r.ops.query()
	if q == nil {
		return nil, nil
	}
	return q.Standbys()
}

// runs reports whether the run runs task n.
func (s *standbyRun) runs(n int32) bool {
	q := s.r.ops.query()
	return q != nil && slices.Contains(q.Stores(), n)
}

func (s *standbyRun) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	<-s.done
	require.NoError(t, s.err)
}

// TestStandbyTakesOverWarm: two instances with StandbyReplicas(1) and two
// tasks. The balancer gives each instance one task and a standby of the
// other's task, caught up with the changelog. When
// one instance stops, the other's standby gives its store up to the task
// (Release before the task starts), whose restore replays only from where
// the standby was, not the partition; the counts then continue exactly
// once across the handover.
func TestStandbyTakesOverWarm(t *testing.T) {
	c := kafkatest.New(t)
	c.TraceTransactions(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("standby")
	const partitions = 2
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	produced := map[int32]int{}
	produce := func(n int) {
		var recs []*kgo.Record
		for p := range int32(partitions) {
			for i := range n {
				recs = append(recs, &kgo.Record{Topic: in, Partition: p, Key: fmt.Appendf(nil, "p%d-k%d", p, i%50), Value: []byte("x")})
			}
			produced[p] += n
		}
		c.Produce(t, recs...)
	}
	// On a timeout, the state of the group, the offsets, the
	// transactions and both runners (a wait of this test failed once in
	// CI, and could not be reproduced).
	var runs []*standbyRun
	state := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "produced %v, committed %v\n%s", produced, c.CommittedOffsets(t, app, in), c.Describe(app, in))
		for i, s := range runs {
			fmt.Fprintf(&b, "--- runner %c: %s", 'a'+i, runState(s.r))
			fmt.Fprintf(&b, "its log, last lines:\n%s\n", lastLines(s.log.String(), 100))
		}
		b.WriteString(kafkatest.Goroutines("flechtwerk/runner.", "flechtwerk/internal/standby.", "flechtwerk/task."))
		return b.String()
	}
	waitCommitted := func(what string) {
		kafkatest.WaitForState(t, 30*time.Second, what, func() bool {
			got := c.CommittedOffsets(t, app, in)
			for p := range int32(partitions) {
				if got[p] != int64(produced[p]) {
					return false
				}
			}
			return true
		}, state)
	}

	a := startStandbyRunner(t, c, app, in, out)
	runs = append(runs, a)
	produce(300)
	waitCommitted("a committed every input")
	b := startStandbyRunner(t, c, app, in, out)
	runs = append(runs, b)

	// Each instance runs one task and keeps a standby of the other's.
	var aTask, bTask int32
	kafkatest.WaitForState(t, 30*time.Second, "one task and one standby on each instance", func() bool {
		_, as := a.offsets()
		_, bs := b.offsets()
		if len(as) != 1 || len(bs) != 1 || as[0] == bs[0] {
			return false
		}
		aTask, bTask = bs[0], as[0]
		return true
	}, state)
	produce(200)
	waitCommitted("both committed every input")
	topic := app + "-changelog"
	// b's standby of a's task reaches the changelog's last stable offset.
	var standbyAt int64
	kafkatest.WaitForState(t, 30*time.Second, "b's standby caught up", func() bool {
		offs, _ := b.offsets()
		end := c.EndOffsets(t, topic)[aTask]
		standbyAt = offs[aTask]
		return end > 0 && standbyAt >= end-1 // at the end, or before the last marker
	}, func() string {
		return fmt.Sprintf("b's standby of task %d at %d, the changelog's end offsets %v\n%s", aTask, standbyAt, c.EndOffsets(t, topic), state())
	})
	require.Contains(t, a.log.String(), fmt.Sprintf(`msg="standby restored" partition=%d`, bTask))
	require.Contains(t, b.log.String(), fmt.Sprintf(`msg="standby restored" partition=%d`, aTask))

	before := len(b.log.String())
	a.stop(t)
	produce(100)
	waitCommitted("b committed every input after the handover")

	// b restored a's task warm from its standby's checkpoint.
	after := b.log.String()[before:]
	require.Contains(t, after, fmt.Sprintf(`msg="standby released" partition=%d`, aTask))
	m := regexp.MustCompile(fmt.Sprintf(`msg="task restored" partition=%d changelog=\S+ records=(\d+) from=(\d+) to=(\d+) full=(\w+)`, aTask)).FindStringSubmatch(after)
	require.NotNil(t, m, "b restored task %d: %s", aTask, after)
	records, _ := strconv.Atoi(m[1])
	from, _ := strconv.ParseInt(m[2], 10, 64)
	to, _ := strconv.ParseInt(m[3], 10, 64)
	require.Equal(t, "false", m[4], "warm: %s", m[0])
	require.GreaterOrEqual(t, from, standbyAt, "the restore starts where the standby was")
	require.LessOrEqual(t, int64(records), to-from, "only the standby's lag is replayed")
	t.Logf("takeover of task %d replayed %d records (offsets %d..%d); the changelog partition holds %d offsets", aTask, records, from, to, to)

	// Exactly once: every key's outputs count 1, 2, ... without a gap or
	// a duplicate, across both owners. The offsets can be visible before
	// the markers of their transaction are written on the output.
	c.WaitSettled(t, out)
	counts := map[string][]int{}
	for _, r := range c.ReadCommitted(t, out) {
		n, err := strconv.Atoi(string(r.Value))
		require.NoError(t, err)
		counts[string(r.Key)] = append(counts[string(r.Key)], n)
	}
	total := 0
	for k, ns := range counts {
		for i, n := range ns {
			require.Equal(t, i+1, n, "output %d of key %s", i, k)
		}
		total += len(ns)
	}
	require.Equal(t, produced[0]+produced[1], total)
	b.stop(t)
}

// TestStandbyReplicasValidation: the option is checked by New.
func TestStandbyReplicasValidation(t *testing.T) {
	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		return nil
	})
	base := []TransformerOpt{SeedBrokers("127.0.0.1:1"), ApplicationID("app"), InputTopics("in")}
	_, err := NewTransformer(counter, append(base, StandbyReplicas(-1))...)
	require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
	require.ErrorContains(t, err, "StandbyReplicas: must be 0 or positive, is -1")
	_, err = NewTransformer(counter, append(base, StandbyReplicas(1), StateDir(""))...)
	require.ErrorContains(t, err, "StandbyReplicas: standby replicas keep their stores in the state directory")

	stateless := transformer.Stateless(func(ctx context.Context, rec *transformer.Record, out *transformer.Outputs) error {
		return nil
	})
	_, err = NewTransformer(stateless, append(base, StandbyReplicas(1))...)
	require.ErrorContains(t, err, "StandbyReplicas: 1 standby replicas of a stateless transformer")
	_, err = NewTransformer(counter, append(base, StandbyReplicas(2))...)
	require.NoError(t, err)
}
