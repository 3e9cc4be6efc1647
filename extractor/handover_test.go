package extractor_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// owner returns the client id of the member of group app that holds
// partition 0 of topic, once the group is stable with members members;
// "" before.
func owner(t testing.TB, c *kafkatest.Cluster, app, topic string, members int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := c.Adm.DescribeGroups(ctx, app)
	if err != nil {
		return ""
	}
	g := groups[app]
	if g.Err != nil || g.State != "Stable" || len(g.Members) != members {
		return ""
	}
	for _, m := range g.Members {
		a, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, tp := range a.Topics {
			if tp.Topic == topic && slices.Contains(tp.Partitions, 0) {
				return m.ClientID
			}
		}
	}
	return ""
}

// TestLaggingTableKeepsCursors hands a token over to an instance whose
// config table has not read yet a config that the previous owner polled to
// its end (the new owner's Enrich of that config sleeps, as a slow fetch
// would). The new owner neither deletes that config's cursor nor polls it
// from the start: it waits until its table has caught up, resumes the
// config from the previous owner's cursor, and a read_committed reader sees
// every item exactly once. Runs on Apache Kafka with KAFKA_BROKERS.
func TestLaggingTableKeepsCursors(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	changelog := app + "-changelog"
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 4))

	var (
		mu    sync.Mutex
		first = map[string]cursor{} // the cursor of B's first poll of each config
	)
	pages := pageFunc(out, 2, 100, nil)
	lagging, release := make(chan struct{}), make(chan struct{})
	var lagOnce, releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	b := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		mu.Lock()
		if _, ok := first[string(cfg.Key)]; !ok {
			first[string(cfg.Key)] = cur
		}
		mu.Unlock()
		return pages(ctx, cfg, cur, e)
	}, extractor.Enrich(func(ctx context.Context, r *configtopic.Record, v conf) (conf, error) {
		if string(r.Key) == "x" {
			lagOnce.Do(func() { close(lagging) })
			select {
			case <-release:
			case <-ctx.Done():
				return v, ctx.Err()
			}
		}
		return v, nil
	}))
	opts := func(name string) []runner.ExtractorOpt {
		// Client ids order the members: a sorts first and keeps the
		// token under range assignment while b stands by.
		return []runner.ExtractorOpt{runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
			runner.PollInterval(100 * time.Millisecond), runner.WithKafkaOpts(kgo.ClientID(name))}
	}

	instA := start(t, c, extractor.New(pages), opts("a")...)
	kafkatest.WaitFor(t, 60*time.Second, "a's items visible", func() bool {
		require.False(t, instA.ended(), "A ended: %v", instA.err)
		return countVisible(t, c, out) >= 4
	})
	instB := start(t, c, b, opts("b")...)
	t.Cleanup(let) // before the instances stop
	kafkatest.WaitFor(t, 60*time.Second, "B stands by, A holds the token", func() bool {
		require.False(t, instB.ended(), "B ended: %v", instB.err)
		return owner(t, c, app, cfgTopic, 2) == "a"
	})

	// x is added: A polls it to its end, B's table does not hold it yet.
	c.Produce(t, configRec(t, cfgTopic, 0, "x", 6))
	kafkatest.WaitFor(t, 60*time.Second, "x's items visible, x read by B's table", func() bool {
		require.False(t, instA.ended(), "A ended: %v", instA.err)
		select {
		case <-lagging:
		default:
			return false
		}
		return countVisible(t, c, out) >= 4+6
	})

	// A leaves; B takes the token over while its table lags. A sweep that
	// takes x for deleted tombstones x's cursor at once; give it time.
	require.NoError(t, instA.stop(t))
	kafkatest.WaitFor(t, 60*time.Second, "B holds the token", func() bool {
		require.False(t, instB.ended(), "B ended: %v", instB.err)
		return owner(t, c, app, cfgTopic, 1) == "b"
	})
	held := time.Now()
	kafkatest.WaitFor(t, 30*time.Second, "x's cursor tombstoned, or 3s with the table lagging", func() bool {
		return slices.Contains(cursorsOf(t, c, changelog, "x"), "<nil>") || time.Since(held) > 3*time.Second
	})
	let()
	kafkatest.WaitFor(t, 60*time.Second, "B polls x", func() bool {
		require.False(t, instB.ended(), "B ended: %v", instB.err)
		mu.Lock()
		defer mu.Unlock()
		_, ok := first["x"]
		return ok
	})
	require.NoError(t, instB.stop(t))
	c.WaitSettled(t, out)
	c.WaitSettled(t, changelog)

	require.NotContains(t, cursorsOf(t, c, changelog, "x"), "<nil>", "the cursor of a live config was deleted")
	mu.Lock()
	require.Equal(t, cursor{Next: 6}, first["x"], "B resumes x from A's cursor")
	mu.Unlock()
	requireExactlyOnce(t, c.ReadCommitted(t, out), map[string]int{"a": 4, "x": 6})
}

// TestRevokedWhileFencing stops an instance while the broker still holds
// its token's fence (InitProducerID), and starts another. The stopping
// instance waits for its fence before it lets the token go: a fence cut
// short would still reach the broker after the new owner's, and fence the
// new owner. The new owner runs every config to its end, exactly once.
func TestRevokedWhileFencing(t *testing.T) {
	c, fc := kafkatest.Fake(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	const items = 100
	c.Produce(t, configRec(t, cfgTopic, 0, "k", items))

	// The first InitProducerID of token 0 is held at the broker until
	// released; the broker then handles it as usual.
	txnID := fencing.TransactionalID(app, 0)
	var inits atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	fc.ControlKey(kmsg.InitProducerID.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		req := kreq.(*kmsg.InitProducerIDRequest)
		if req.TransactionalID == nil || *req.TransactionalID != txnID || inits.Add(1) != 1 {
			return nil, nil, false
		}
		fc.SleepControl(func() { <-release })
		return nil, nil, false
	})

	// One page of two items per poll: the new owner commits for a while.
	ex := extractor.New(pageFunc(out, 2, 1, nil))
	opts := func(name string) []runner.ExtractorOpt {
		return []runner.ExtractorOpt{runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
			runner.PollInterval(20 * time.Millisecond), runner.WithKafkaOpts(kgo.ClientID(name))}
	}
	instA := start(t, c, ex, opts("a")...)
	t.Cleanup(let) // before the instances stop
	kafkatest.WaitFor(t, 60*time.Second, "A's fence held", func() bool {
		require.False(t, instA.ended(), "A ended: %v", instA.err)
		return inits.Load() >= 1
	})

	instA.cancel()
	stopped := time.Now()
	instB := start(t, c, ex, opts("b")...)
	kafkatest.WaitFor(t, 60*time.Second, "B commits, or A waits 3s for its fence", func() bool {
		require.False(t, instB.ended(), "B ended: %v", instB.err)
		return countVisible(t, c, out) > 0 || !instA.ended() && time.Since(stopped) > 3*time.Second
	})
	let() // A's fence reaches the broker now
	require.NoError(t, instA.wait(t, 60*time.Second))
	kafkatest.WaitFor(t, 60*time.Second, "all items visible", func() bool {
		require.False(t, instB.ended(), "B ended: %v", instB.err)
		return countVisible(t, c, out) >= items
	})
	require.NoError(t, instB.stop(t))
	c.WaitSettled(t, out)
	requireExactlyOnce(t, c.ReadCommitted(t, out), map[string]int{"k": items})
}
