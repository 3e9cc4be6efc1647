package runner

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestStandbyOfNamedStoresOnly: a stage that keeps a named store (and so
// a timer store) but no default per-key state gets standby replicas like
// a stateful one: with two instances and two tasks, each keeps a standby
// of the other's task, and both report changelog offsets of both tasks
// to the balancer.
func TestStandbyOfNamedStoresOnly(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("sbnamed")
	const partitions = 2
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	start := func() *standbyRun {
		seen := transformer.NewStore[int]("seen", nil)
		st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
			n, _, err := seen.Get(o, rec.Key)
			if err != nil {
				return err
			}
			return seen.Put(o, rec.Key, n+1)
		}, transformer.Stores(seen))
		l := &syncLog{}
		r, err := NewTransformer(st, SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in),
			StateDir(t.TempDir()), StandbyReplicas(1), SessionTimeout(3*time.Second), CommitInterval(50*time.Millisecond),
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
	a, b := start(), start()
	var recs []*kgo.Record
	for p := range int32(partitions) {
		for i := range 20 {
			recs = append(recs, &kgo.Record{Topic: in, Partition: p, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("x")})
		}
	}
	c.Produce(t, recs...)
	kafkatest.WaitFor(t, 30*time.Second, "every input committed", func() bool {
		o := c.CommittedOffsets(t, app, in)
		return o[0] == 20 && o[1] == 20
	})
	kafkatest.WaitFor(t, 60*time.Second, "a standby of the other task on each instance, with offsets of both", func() bool {
		for _, s := range []*standbyRun{a, b} {
			offs, tasks := s.offsets()
			if len(tasks) != 1 || s.runs(tasks[0]) || len(offs) != partitions {
				return false
			}
			for _, o := range offs {
				if o < 20 { // the store's 20 writes (and the timer store's)
					return false
				}
			}
		}
		return true
	})
	a.stop(t)
	b.stop(t)
}
