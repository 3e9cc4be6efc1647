package extractor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestCursorResume stops the extractor while a poll is blocked mid-page
// (records of the page sent, not committed). Nothing of that page is
// visible; on restart the config resumes from the last committed cursor and
// a read_committed reader sees every item exactly once.
func TestCursorResume(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	c.CreateTopic(t, out, 2)
	// Both configs on partition 0: ownership follows the key hash, not
	// the partition the record sits on.
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 20), configRec(t, cfgTopic, 0, "b", 20))

	blocked := make(chan struct{})
	var once sync.Once
	ex := pager(out, 5, 100, func(ctx context.Context, key string, cur cursor) error {
		if key == "a" && cur.Next == 10 {
			// Third page of "a": its records are sent; block until
			// the extractor is killed.
			once.Do(func() { close(blocked) })
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	opts := []runner.ExtractorOpt{runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour)}
	first := start(t, c, ex, opts...)
	select {
	case <-blocked:
	case <-first.done:
		t.Fatalf("extractor ended: %v", first.err)
	case <-time.After(60 * time.Second):
		t.Fatal("poll of a never reached its third page")
	}
	require.NoError(t, first.stop(t))

	// The last committed page's markers may not be written yet (EndTxn
	// returns before them).
	c.WaitSettled(t, out)
	got := values(c.ReadCommitted(t, out))
	require.Len(t, got["a"], 10, "only the two committed pages of a are visible: %v", got["a"])
	for i := range 10 {
		require.Contains(t, got["a"], item("a", i))
	}

	var (
		mu      sync.Mutex
		resumed = map[string]cursor{}
		had     = map[string]bool{}
	)
	ex2 := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		mu.Lock()
		if _, ok := resumed[string(cfg.Key)]; !ok {
			resumed[string(cfg.Key)] = cur
			had[string(cfg.Key)] = e.HadCursor()
		}
		mu.Unlock()
		for cur.Next < cfg.Config.Items {
			end := min(cur.Next+5, cfg.Config.Items)
			for i := cur.Next; i < end; i++ {
				e.Send(out, cfg.Key, []byte(item(string(cfg.Key), i)))
			}
			cur.Next = end
			if err := e.Commit(ctx, cur); err != nil {
				return err
			}
		}
		return nil
	})
	second := start(t, c, ex2, opts...)
	kafkatest.WaitFor(t, 60*time.Second, "all 40 items visible", func() bool {
		require.False(t, second.ended(), "extractor ended: %v", second.err)
		return countVisible(t, c, out) >= 40
	})
	require.NoError(t, second.stop(t))

	requireExactlyOnce(t, c.ReadCommitted(t, out), map[string]int{"a": 20, "b": 20})
	mu.Lock()
	defer mu.Unlock()
	require.True(t, had["a"])
	require.Equal(t, cursor{Next: 10}, resumed["a"], "a resumes after its last committed page")

	// The changelog holds the final cursor of each config. The outputs
	// being visible does not say the changelog's markers of the same
	// transactions are written.
	c.WaitSettled(t, app+"-changelog")
	final := map[string]cursor{}
	for _, r := range c.ReadCommitted(t, app+"-changelog") {
		var cur cursor
		require.NoError(t, json.Unmarshal(r.Value, &cur))
		final[string(r.Key)] = cur
		require.Equal(t, extractor.Token(r.Key, 2), r.Partition, "cursor of %s on its token's partition", r.Key)
	}
	require.Equal(t, map[string]cursor{"a": {20}, "b": {20}}, final)
}

// TestHandover runs two instances: they split the configs by token, and when
// one leaves the other takes its tokens over, resuming every cursor. No item
// is lost or duplicated.
func TestHandover(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	const tokens, items = 4, 200
	c.CreateTopic(t, cfgTopic, tokens)
	c.CreateTopic(t, out, 3)

	want := map[string]int{}
	var recs []*kgo.Record
	covered := map[int32]bool{}
	for i := 0; len(want) < 12 || len(covered) < tokens; i++ {
		key := fmt.Sprintf("c%02d", i)
		want[key] = items
		covered[extractor.Token([]byte(key), tokens)] = true
		recs = append(recs, configRec(t, cfgTopic, int32(i%tokens), key, items))
	}
	c.Produce(t, recs...)

	var (
		log  polls
		fast atomic.Bool
	)
	instance := func(name string) *extractor.Stage[conf, cursor] {
		return extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
			log.add(name, string(cfg.Key))
			// One page of two items per poll until the handover is
			// done, then everything.
			for p := 0; cur.Next < cfg.Config.Items && (p < 1 || fast.Load()); p++ {
				for i := cur.Next; i < cur.Next+2; i++ {
					e.Send(out, cfg.Key, []byte(item(string(cfg.Key), i)))
				}
				cur.Next += 2
				if err := e.Commit(ctx, cur); err != nil {
					return err
				}
			}
			return nil
		})
	}
	opts := []runner.ExtractorOpt{runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(100 * time.Millisecond)}

	a := start(t, c, instance("A"), opts...)
	kafkatest.WaitFor(t, 60*time.Second, "A polls", func() bool {
		require.False(t, a.ended(), "A ended: %v", a.err)
		return log.count("A") >= 3*len(want)
	})
	b := start(t, c, instance("B"), opts...)
	kafkatest.WaitFor(t, 60*time.Second, "B polls", func() bool {
		require.False(t, b.ended(), "B ended: %v", b.err)
		return log.count("B") >= 3
	})

	// While both run, each token's configs are polled by one instance.
	from := time.Now()
	time.Sleep(time.Second)
	byInstance := map[string]map[int32]bool{"A": {}, "B": {}}
	for _, e := range log.since(from) {
		byInstance[e.instance][extractor.Token([]byte(e.key), tokens)] = true
	}
	require.NotEmpty(t, byInstance["A"], "A polls nothing while B runs")
	require.NotEmpty(t, byInstance["B"], "B polls nothing while A runs")
	for tok := range byInstance["A"] {
		require.False(t, byInstance["B"][tok], "token %d polled by both instances", tok)
	}
	require.Len(t, byInstance["A"], tokens-len(byInstance["B"]))
	require.Less(t, countVisible(t, c, out), len(want)*items, "the handover must happen mid-way")

	// A leaves: B takes over A's tokens and finishes every config.
	require.NoError(t, a.stop(t))
	left := time.Now()
	kafkatest.WaitFor(t, 60*time.Second, "B polls every token", func() bool {
		require.False(t, b.ended(), "B ended: %v", b.err)
		took := map[int32]bool{}
		for _, e := range log.since(left) {
			took[extractor.Token([]byte(e.key), tokens)] = true
		}
		return len(took) == tokens
	})
	fast.Store(true)
	kafkatest.WaitFor(t, 90*time.Second, "all items visible", func() bool {
		require.False(t, b.ended(), "B ended: %v", b.err)
		return countVisible(t, c, out) >= len(want)*items
	})
	require.NoError(t, b.stop(t))
	requireExactlyOnce(t, c.ReadCommitted(t, out), want)
}

// TestZombie fences an instance's token while one of its polls is blocked
// mid-page, as a new owner does. The zombie cannot make its page visible:
// its commit fails, Run ends with fencing.ErrFenced, and the new owner's
// transaction is unaffected.
func TestZombie(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "z", 10))

	blocked, release := make(chan struct{}), make(chan struct{})
	ex := pager(out, 5, 100, func(ctx context.Context, key string, cur cursor) error {
		if cur.Next == 5 {
			close(blocked)
			<-release // a paused process: deaf to everything
		}
		return nil
	})
	zombie := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour))
	select {
	case <-blocked:
	case <-zombie.done:
		t.Fatalf("extractor ended: %v", zombie.err)
	case <-time.After(60 * time.Second):
		t.Fatal("poll never reached its second page")
	}

	// The new owner of token 0 fences the zombie and commits its own
	// transaction.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owner, err := fencing.Init(ctx, fencing.TransactionalID(app, 0), 10*time.Second,
		kgo.SeedBrokers(c.Brokers...), kgo.DefaultProduceTopic(out))
	require.NoError(t, err)
	defer owner.Close()
	require.NoError(t, owner.BeginTransaction())
	require.NoError(t, owner.ProduceSync(ctx, &kgo.Record{Key: []byte("z"), Value: []byte("new-owner")}).FirstErr())
	require.NoError(t, owner.EndTransaction(ctx, kgo.TryCommit))

	close(release)
	err = zombie.wait(t, 60*time.Second)
	require.Error(t, err)
	require.ErrorIs(t, err, fencing.ErrFenced)
	require.Contains(t, err.Error(), `"z"`)

	c.WaitSettled(t, out) // the new owner's commit marker
	got := values(c.ReadCommitted(t, out))
	require.ElementsMatch(t, []string{"z-0", "z-1", "z-2", "z-3", "z-4", "new-owner"}, got["z"])
	// The zombie's cursor did not move either.
	var last cursor
	for _, r := range c.ReadCommitted(t, app+"-changelog") {
		require.NoError(t, json.Unmarshal(r.Value, &last))
	}
	require.Equal(t, cursor{Next: 5}, last)
}

// TestConfigAddAndTombstone adds a config record while running (it is
// polled) and tombstones one (its polls stop).
func TestConfigAddAndTombstone(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, app := kafkatest.Name("cfg"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	c.Produce(t, configRec(t, cfgTopic, 1, "a", 1))

	var log polls
	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		log.add("", string(cfg.Key))
		return nil
	})
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(50*time.Millisecond))
	kafkatest.WaitFor(t, 60*time.Second, "a polled", func() bool {
		require.False(t, rn.ended(), "extractor ended: %v", rn.err)
		return log.countKey("a") >= 3
	})
	require.Zero(t, log.countKey("b"))

	c.Produce(t, configRec(t, cfgTopic, 0, "b", 1))
	kafkatest.WaitFor(t, 30*time.Second, "b polled", func() bool { return log.countKey("b") >= 3 })

	c.Produce(t, &kgo.Record{Topic: cfgTopic, Partition: 1, Key: []byte("a")}) // tombstone
	kafkatest.WaitFor(t, 30*time.Second, "a no longer polled", func() bool {
		a, b := log.countKey("a"), log.countKey("b")
		time.Sleep(300 * time.Millisecond)
		return log.countKey("a") == a && log.countKey("b") > b
	})
	a, b := log.countKey("a"), log.countKey("b")
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, a, log.countKey("a"), "a tombstoned config is not polled")
	require.Greater(t, log.countKey("b"), b+3, "b is still polled every interval")
	require.NoError(t, rn.stop(t))
}

// TestPollError ends Run with an error naming the config key; the failed
// poll's open page is not visible, its earlier committed page is.
func TestPollError(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	c.CreateTopic(t, out, 2)
	c.Produce(t, configRec(t, cfgTopic, 0, "bad", 10))

	boom := errors.New("source exploded")
	ex := pager(out, 5, 100, func(ctx context.Context, key string, cur cursor) error {
		if cur.Next == 5 {
			return boom
		}
		return nil
	})
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour))
	err := rn.wait(t, 60*time.Second)
	require.ErrorIs(t, err, boom)
	var perr *extractor.PollError
	require.ErrorAs(t, err, &perr)
	require.Equal(t, "bad", string(perr.Key))
	require.Contains(t, err.Error(), `config "bad"`)

	c.WaitSettled(t, out) // the committed page's markers
	got := values(c.ReadCommitted(t, out))
	require.ElementsMatch(t, []string{"bad-0", "bad-1", "bad-2", "bad-3", "bad-4"}, got["bad"])
}

// TestPageTimeout fails Run when a page stays open past PageTimeout, naming
// the config key; nothing of the page is visible.
func TestPageTimeout(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "slow", 10))

	ex := pager(out, 5, 100, func(ctx context.Context, key string, cur cursor) error {
		<-ctx.Done() // the source hangs
		return ctx.Err()
	})
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour), runner.PageTimeout(500*time.Millisecond),
		runner.TransactionTimeout(10*time.Second))
	err := rn.wait(t, 60*time.Second)
	require.ErrorIs(t, err, extractor.ErrPageTimeout)
	require.Contains(t, err.Error(), `config "slow"`)
	require.Empty(t, c.ReadCommitted(t, out))
}

// TestUndecodableConfig ends Run with an error naming the config record.
func TestUndecodableConfig(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, app := kafkatest.Name("cfg"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	c.Produce(t, configRec(t, cfgTopic, 1, "good", 1),
		&kgo.Record{Topic: cfgTopic, Partition: 1, Key: []byte("broken"), Value: []byte("{not json")})

	ex := pager("unused", 5, 1, nil)
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour))
	err := rn.wait(t, 60*time.Second)
	var rerr *configtopic.RecordError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, cfgTopic, rerr.Topic)
	require.Equal(t, int32(1), rerr.Partition)
	require.Equal(t, int64(1), rerr.Offset)
	require.Contains(t, err.Error(), fmt.Sprintf("topic %s partition 1 offset 1", cfgTopic))
}

// TestEnrichFailure reports a failing enrich hook like an undecodable record.
func TestEnrichFailure(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, app := kafkatest.Name("cfg"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "t1", 1))

	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		return nil
	}, extractor.Enrich(func(ctx context.Context, rec *configtopic.Record, c conf) (conf, error) {
		return c, errors.New("secret not found")
	}))
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour))
	err := rn.wait(t, 60*time.Second)
	var rerr *configtopic.RecordError
	require.ErrorAs(t, err, &rerr)
	require.Contains(t, err.Error(), "secret not found")
	require.Contains(t, err.Error(), fmt.Sprintf("topic %s partition 0 offset 0", cfgTopic))
}

// TestStartupErrors checks the coded errors of Run for config topics the
// cluster cannot serve.
func TestStartupErrors(t *testing.T) {
	c := kafkatest.New(t)
	two, three := kafkatest.Name("cfg2"), kafkatest.Name("cfg3")
	c.CreateTopic(t, two, 2)
	c.CreateTopic(t, three, 3)
	ex := pager("unused", 1, 1, nil)

	for _, tc := range []struct {
		name   string
		topics []string
		want   error
	}{
		{"missing topic", []string{two, kafkatest.Name("missing")}, flechtwerk.ErrMissingTopic},
		{"unequal partition counts", []string{two, three}, flechtwerk.ErrPartitionMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := runner.NewExtractor(ex, runner.SeedBrokers(c.Brokers...),
				runner.ApplicationID(kafkatest.Name("app")), runner.ConfigTopics(tc.topics...),
				runner.PollInterval(time.Second), runner.StateDir(t.TempDir()))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			err = r.Run(ctx)
			require.ErrorIs(t, err, tc.want)
			var cerr *flechtwerk.ConfigError
			require.ErrorAs(t, err, &cerr)
		})
	}
}

// TestNewRunnerValidation reports every configuration problem at once, each
// with its code.
func TestNewRunnerValidation(t *testing.T) {
	ok := pager("out", 1, 1, nil)
	base := []runner.ExtractorOpt{runner.SeedBrokers("127.0.0.1:1"), runner.ApplicationID("app"),
		runner.ConfigTopics("cfg"), runner.PollInterval(time.Second)}
	for _, tc := range []struct {
		name string
		ex   runner.Stage
		opts []runner.ExtractorOpt
		want []error
	}{
		{"valid", ok, nil, nil},
		{"page timeout not below transaction timeout", ok,
			[]runner.ExtractorOpt{runner.PageTimeout(time.Minute), runner.TransactionTimeout(time.Minute)},
			[]error{flechtwerk.ErrTransactionTimeout}},
		{"no poll interval", ok, []runner.ExtractorOpt{runner.PollInterval(0)}, []error{flechtwerk.ErrNoPollInterval}},
		{"everything missing", ok,
			[]runner.ExtractorOpt{runner.SeedBrokers(), runner.ApplicationID(""), runner.ConfigTopics(), runner.Concurrency(0)},
			[]error{flechtwerk.ErrNoBrokers, flechtwerk.ErrEmptyApplicationID, flechtwerk.ErrNoConfigTopics, flechtwerk.ErrInvalidOption}},
		{"duplicate and changelog topics", ok,
			[]runner.ExtractorOpt{runner.ConfigTopics("cfg", "cfg", "app-changelog")}, []error{flechtwerk.ErrDuplicateTopic}},
		{"nil poll function", extractor.New[conf, cursor](nil), nil, []error{flechtwerk.ErrInvalidTransformer}},
		{"cursor codec of another type", extractor.New(func(context.Context, extractor.Config[conf], cursor, *extractor.Emitter[cursor]) error { return nil },
			extractor.CursorCodec(transformer.Bytes())), nil, []error{flechtwerk.ErrInvalidTransformer}},
		{"config codec of another type", extractor.New(func(context.Context, extractor.Config[conf], cursor, *extractor.Emitter[cursor]) error { return nil },
			extractor.ConfigCodec(configtopic.Bytes())), nil, []error{flechtwerk.ErrInvalidTransformer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runner.NewExtractor(tc.ex, append(append([]runner.ExtractorOpt{}, base...), tc.opts...)...)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range tc.want {
				require.ErrorIs(t, err, w)
			}
		})
	}
}

// TestTokenMatchesKafkaPartitioner: a config written by key with Kafka's
// default partitioner sits on the partition of its token.
func TestTokenMatchesKafkaPartitioner(t *testing.T) {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for _, n := range []int32{1, 2, 3, 7, 12} {
		for i := range 200 {
			key := []byte(fmt.Sprintf("tenant-%d", i))
			require.Equal(t, int32(p.Partition(&kgo.Record{Key: key}, int(n))), extractor.Token(key, n), "key %s, %d tokens", key, n)
		}
	}
}

// TestConcurrencyBound: at most Concurrency polls run at once.
func TestConcurrencyBound(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, app := kafkatest.Name("cfg"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	var recs []*kgo.Record
	for i := range 8 {
		recs = append(recs, configRec(t, cfgTopic, int32(i%2), fmt.Sprintf("k%d", i), 1))
	}
	c.Produce(t, recs...)
	var running, peak, total atomic.Int64
	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		total.Add(1)
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(10*time.Millisecond), runner.Concurrency(3))
	kafkatest.WaitFor(t, 60*time.Second, "polls", func() bool {
		require.False(t, rn.ended(), "extractor ended: %v", rn.err)
		return total.Load() >= 40
	})
	require.NoError(t, rn.stop(t))
	require.Equal(t, int64(3), peak.Load())
}

// TestHotStandby runs two instances on one token: one polls, the other
// stands by and takes over when the first leaves.
func TestHotStandby(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, app := kafkatest.Name("cfg"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "only", 1))

	var log polls
	instance := func(name string) *extractor.Stage[conf, cursor] {
		return extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
			log.add(name, string(cfg.Key))
			return nil
		})
	}
	opts := []runner.ExtractorOpt{runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(50 * time.Millisecond)}
	a := start(t, c, instance("A"), opts...)
	kafkatest.WaitFor(t, 60*time.Second, "A polls", func() bool { return log.count("A") >= 3 })
	b := start(t, c, instance("B"), opts...)
	// Let B join; then only one of them polls.
	kafkatest.WaitFor(t, 60*time.Second, "one active instance", func() bool {
		from := time.Now()
		time.Sleep(500 * time.Millisecond)
		active := map[string]bool{}
		for _, e := range log.since(from) {
			active[e.instance] = true
		}
		return len(active) == 1
	})
	from := time.Now()
	time.Sleep(500 * time.Millisecond)
	active := ""
	for _, e := range log.since(from) {
		if active == "" {
			active = e.instance
		}
		require.Equal(t, active, e.instance, "two instances poll one token")
	}
	require.NotEmpty(t, active)
	standby, stop := "B", a
	if active == "B" {
		standby, stop = "A", b
	}
	require.NoError(t, stop.stop(t))
	before := log.count(standby)
	kafkatest.WaitFor(t, 60*time.Second, "standby takes over", func() bool { return log.count(standby) >= before+3 })
}
