package extractor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// keyOfToken returns a key with prefix whose token among n is want.
func keyOfToken(prefix string, want, n int32) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if extractor.Token([]byte(k), n) == want {
			return k
		}
	}
}

// cursorsOf returns the read_committed changelog records of key in order:
// the cursor values, "<nil>" for a tombstone.
func cursorsOf(t testing.TB, c *kafkatest.Cluster, changelog, key string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tds, err := c.Adm.ListTopics(ctx, changelog)
	require.NoError(t, err)
	if !tds.Has(changelog) || tds[changelog].Err != nil {
		return nil // not created yet
	}
	var out []string
	for _, r := range c.ReadCommitted(t, changelog) {
		if string(r.Key) != key {
			continue
		}
		if r.Value == nil {
			out = append(out, "<nil>")
		} else {
			out = append(out, string(r.Value))
		}
	}
	return out
}

// TestFairScheduling: with one concurrency slot and polls slower than the
// interval, every config is still polled, in turn: the most polled config
// is at most two polls ahead of the least polled.
func TestFairScheduling(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, app := kafkatest.Name("cfg"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	keys := []string{"k0", "k1", "k2", "k3"}
	for i, k := range keys {
		c.Produce(t, configRec(t, cfgTopic, int32(i%2), k, 1))
	}
	var log polls
	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		log.add("", string(cfg.Key))
		time.Sleep(30 * time.Millisecond) // slower than the interval
		return nil
	})
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(10*time.Millisecond), runner.Concurrency(1))
	kafkatest.WaitFor(t, 60*time.Second, "40 polls", func() bool {
		require.False(t, rn.ended(), "extractor ended: %v", rn.err)
		return log.count("") >= 40
	})
	require.NoError(t, rn.stop(t))
	var counts []int
	for _, k := range keys {
		counts = append(counts, log.countKey(k))
	}
	require.Positive(t, slices.Min(counts), "every config is polled: %v", counts)
	require.LessOrEqual(t, slices.Max(counts)-slices.Min(counts), 2, "polls per config %v", counts)
}

// TestConsumerOptsCannotOverrideDelivery: consumer options that would
// replace the runner's partition callbacks, its balancer or its reset
// offset do not: the extractor still gets its tokens and polls.
func TestConsumerOptsCannotOverrideDelivery(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, app := kafkatest.Name("cfg"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 1), configRec(t, cfgTopic, 1, "b", 1))
	var log polls
	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		log.add("", string(cfg.Key))
		return nil
	})
	noop := func(context.Context, *kgo.Client, map[string][]int32) {}
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(50*time.Millisecond),
		runner.WithConsumerOpts(kgo.OnPartitionsAssigned(noop), kgo.OnPartitionsRevoked(noop),
			kgo.Balancers(kgo.RoundRobinBalancer()), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd())))
	kafkatest.WaitFor(t, 30*time.Second, "both configs polled", func() bool {
		require.False(t, rn.ended(), "extractor ended: %v", rn.err)
		return log.countKey("a") >= 2 && log.countKey("b") >= 2
	})
	require.NoError(t, rn.stop(t))
}

// panicCodec is a cursor codec whose Encode panics.
type panicCodec struct{ transformer.Codec[cursor] }

func (panicCodec) Encode(cursor) ([]byte, error) { panic("encoder exploded") }

// panicDecoder is a config decoder that panics.
type panicDecoder struct{}

func (panicDecoder) Decode([]byte) (conf, error) { panic("decoder exploded") }

// TestPollPanic: a panic in a poll function ends Run with a *PollError
// naming the config key and carrying the stack; its open page is aborted,
// its committed page stays; the blocked open page of a config of another
// token is aborted too, and no transaction is left open.
func TestPollPanic(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	c.CreateTopic(t, out, 2)
	boom, slow := keyOfToken("boom", 0, 2), keyOfToken("slow", 1, 2)
	c.Produce(t, configRec(t, cfgTopic, 0, boom, 10), configRec(t, cfgTopic, 1, slow, 10))

	blocked := make(chan struct{})
	var once sync.Once
	ex := pager(out, 5, 100, func(ctx context.Context, key string, cur cursor) error {
		switch {
		case key == slow:
			// slow's first page is sent, never committed.
			once.Do(func() { close(blocked) })
			<-ctx.Done()
			return ctx.Err()
		case key == boom && cur.Next == 5:
			<-blocked
			panic(fmt.Sprintf("kaboom at %d", cur.Next))
		}
		return nil
	})
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour))
	err := rn.wait(t, 60*time.Second)
	var perr *extractor.PollError
	require.ErrorAs(t, err, &perr)
	require.Equal(t, boom, string(perr.Key))
	var pe *flechtwerk.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "kaboom at 5", pe.Value)
	require.Contains(t, err.Error(), fmt.Sprintf("config %q", boom))
	require.Contains(t, err.Error(), "panic: kaboom at 5")
	require.Contains(t, err.Error(), "TestPollPanic", "the error carries the stack")

	// No transaction is left open: the last stable offset reaches the
	// high watermark on the output and the changelog. The committed page's
	// markers may be written after Run ended (EndTxn returns before them);
	// an open transaction would keep them apart for the 60s transaction
	// timeout, past WaitSettled's 30s.
	c.WaitSettled(t, out)
	c.WaitSettled(t, app+"-changelog")
	got := values(c.ReadCommitted(t, out))
	require.ElementsMatch(t, []string{item(boom, 0), item(boom, 1), item(boom, 2), item(boom, 3), item(boom, 4)}, got[boom])
	require.Empty(t, got[slow], "the open page of the other token is aborted")
}

// TestCodecPanic: a panicking cursor codec ends Run with a *PollError
// naming the config key; a panicking config decoder with a
// *configtopic.RecordError naming the record. Both carry the panic.
func TestCodecPanic(t *testing.T) {
	c := kafkatest.New(t)
	t.Run("cursor codec", func(t *testing.T) {
		cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
		c.CreateTopic(t, cfgTopic, 1)
		c.CreateTopic(t, out, 1)
		c.Produce(t, configRec(t, cfgTopic, 0, "enc", 3))
		ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
			e.Send(out, cfg.Key, []byte("x"))
			return e.Commit(ctx, cursor{Next: 1})
		}, extractor.CursorCodec[cursor](panicCodec{transformer.JSON[cursor]()}))
		rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
			runner.PollInterval(time.Hour))
		err := rn.wait(t, 60*time.Second)
		var perr *extractor.PollError
		require.ErrorAs(t, err, &perr)
		require.Equal(t, "enc", string(perr.Key))
		require.Contains(t, err.Error(), "panic: encoder exploded")
		require.Empty(t, c.ReadCommitted(t, out))
	})
	t.Run("config decoder", func(t *testing.T) {
		cfgTopic, app := kafkatest.Name("cfg"), kafkatest.Name("app")
		c.CreateTopic(t, cfgTopic, 1)
		c.Produce(t, configRec(t, cfgTopic, 0, "dec", 3))
		ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
			return nil
		}, extractor.ConfigCodec[conf](panicDecoder{}))
		rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
			runner.PollInterval(time.Hour))
		err := rn.wait(t, 60*time.Second)
		var rerr *configtopic.RecordError
		require.ErrorAs(t, err, &rerr)
		require.Equal(t, int64(0), rerr.Offset)
		var pe *flechtwerk.PanicError
		require.ErrorAs(t, err, &pe)
		require.Contains(t, err.Error(), "panic: decoder exploded")
	})
}

// TestTombstonedCursors: under DeleteCursors (the default) a tombstoned
// config's cursor is tombstoned in the changelog — also when the config
// was tombstoned while the extractor was down — and a config added again
// starts from an empty cursor; under KeepCursors the cursor stays and a
// config added again resumes.
func TestTombstonedCursors(t *testing.T) {
	c := kafkatest.New(t)
	for _, tc := range []struct {
		name string
		opts []runner.ExtractorOpt
		keep bool
	}{
		{"delete by default", nil, false},
		{"keep", []runner.ExtractorOpt{runner.TombstonedCursors(runner.KeepCursors)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
			changelog := app + "-changelog"
			c.CreateTopic(t, cfgTopic, 1)
			c.CreateTopic(t, out, 1)
			c.Produce(t, configRec(t, cfgTopic, 0, "a", 4), configRec(t, cfgTopic, 0, "b", 4))
			var (
				mu     sync.Mutex
				starts = map[string][]cursor{}
			)
			ex := pageFunc(out, 2, 100, nil)
			logged := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
				mu.Lock()
				starts[string(cfg.Key)] = append(starts[string(cfg.Key)], cur)
				mu.Unlock()
				return ex(ctx, cfg, cur, e)
			})
			opts := append([]runner.ExtractorOpt{runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
				runner.PollInterval(50 * time.Millisecond)}, tc.opts...)
			rn := start(t, c, logged, opts...)
			kafkatest.WaitFor(t, 60*time.Second, "both cursors at 4", func() bool {
				require.False(t, rn.ended(), "extractor ended: %v", rn.err)
				return slices.Contains(cursorsOf(t, c, changelog, "a"), `{"Next":4}`) &&
					slices.Contains(cursorsOf(t, c, changelog, "b"), `{"Next":4}`)
			})

			// a is tombstoned while running.
			c.Produce(t, &kgo.Record{Topic: cfgTopic, Partition: 0, Key: []byte("a")})
			if tc.keep {
				time.Sleep(time.Second)
				require.Equal(t, []string{`{"Next":2}`, `{"Next":4}`}, cursorsOf(t, c, changelog, "a"))
			} else {
				kafkatest.WaitFor(t, 30*time.Second, "a's cursor tombstoned", func() bool {
					cs := cursorsOf(t, c, changelog, "a")
					return len(cs) > 0 && cs[len(cs)-1] == "<nil>"
				})
			}
			// a is added again with more items.
			c.Produce(t, configRec(t, cfgTopic, 0, "a", 6))
			kafkatest.WaitFor(t, 30*time.Second, "a's cursor at 6", func() bool {
				require.False(t, rn.ended(), "extractor ended: %v", rn.err)
				cs := cursorsOf(t, c, changelog, "a")
				return cs[len(cs)-1] == `{"Next":6}`
			})
			require.NoError(t, rn.stop(t))
			// The cursor being visible does not say the output's markers
			// of the same transaction are written.
			c.WaitSettled(t, out)
			mu.Lock()
			fresh := 0 // polls of a that started without a cursor
			for _, cur := range starts["a"] {
				if cur == (cursor{}) {
					fresh++
				}
			}
			mu.Unlock()
			if tc.keep {
				// a resumed: items 4 and 5 only, once each.
				require.Equal(t, 1, fresh)
				requireExactlyOnce(t, c.ReadCommitted(t, out), map[string]int{"a": 6, "b": 4})
			} else {
				// a started over: items 0-3 twice, 4-5 once.
				require.Equal(t, 2, fresh, "a added again starts without a cursor")
				got := values(c.ReadCommitted(t, out))
				require.Len(t, got["a"], 10)
			}

			// b is tombstoned while the extractor is down: the next
			// owner of its token deletes the cursor (or keeps it).
			c.Produce(t, &kgo.Record{Topic: cfgTopic, Partition: 0, Key: []byte("b")})
			rn = start(t, c, logged, opts...)
			if tc.keep {
				time.Sleep(2 * time.Second)
				require.Equal(t, []string{`{"Next":2}`, `{"Next":4}`}, cursorsOf(t, c, changelog, "b"))
			} else {
				kafkatest.WaitFor(t, 60*time.Second, "b's cursor tombstoned", func() bool {
					require.False(t, rn.ended(), "extractor ended: %v", rn.err)
					cs := cursorsOf(t, c, changelog, "b")
					return cs[len(cs)-1] == "<nil>"
				})
			}
			require.NoError(t, rn.stop(t))
		})
	}
}

// TestNoEmptyTransactions: committing the committed cursor again with no
// records writes nothing, and deleting the cursor of a tombstoned config
// that never had one writes nothing; a real cursor change and a real
// delete still land.
func TestNoEmptyTransactions(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	changelog := app + "-changelog"
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 2), configRec(t, cfgTopic, 0, "empty", 0))
	var log polls
	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		log.add("", string(cfg.Key))
		if cfg.Config.Items == 0 {
			return nil // never a cursor
		}
		for ; cur.Next < cfg.Config.Items; cur.Next++ {
			e.Send(out, cfg.Key, []byte(item(string(cfg.Key), cur.Next)))
		}
		// The same cursor, three times per poll.
		for range 3 {
			if err := e.Commit(ctx, cur); err != nil {
				return err
			}
		}
		return nil
	})
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(20*time.Millisecond), runner.Concurrency(1))
	kafkatest.WaitFor(t, 60*time.Second, "10 polls of a", func() bool {
		require.False(t, rn.ended(), "extractor ended: %v", rn.err)
		return log.countKey("a") >= 10
	})
	// The first page's markers may not be written yet (EndTxn returns
	// before them); the end offsets below count them.
	c.WaitSettled(t, changelog)
	c.WaitSettled(t, out)
	require.Equal(t, []string{`{"Next":2}`}, cursorsOf(t, c, changelog, "a"), "one cursor write")
	ends := c.EndOffsets(t, changelog)
	outEnds := c.EndOffsets(t, out)

	// A real cursor change lands.
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 3))
	kafkatest.WaitFor(t, 30*time.Second, "a's cursor at 3", func() bool {
		return slices.Equal([]string{`{"Next":2}`, `{"Next":3}`}, cursorsOf(t, c, changelog, "a"))
	})
	// Each of the two cursor changes was one transaction: a record and
	// its commit marker on the changelog, two records and a marker on
	// the output.
	require.Equal(t, int64(2), ends[0], "changelog end offset after the first cursor")
	require.Equal(t, int64(3), outEnds[0], "output end offset after the first page")
	require.Equal(t, int64(4), c.EndOffsets(t, changelog)[0])

	// The delete of a config without a cursor writes nothing; a real
	// delete, seen after it, lands.
	c.Produce(t, &kgo.Record{Topic: cfgTopic, Partition: 0, Key: []byte("empty")})
	c.Produce(t, &kgo.Record{Topic: cfgTopic, Partition: 0, Key: []byte("a")})
	kafkatest.WaitFor(t, 30*time.Second, "a's cursor tombstoned", func() bool {
		cs := cursorsOf(t, c, changelog, "a")
		return cs[len(cs)-1] == "<nil>"
	})
	require.NoError(t, rn.stop(t))
	require.Empty(t, cursorsOf(t, c, changelog, "empty"))
	require.Equal(t, int64(6), c.EndOffsets(t, changelog)[0], "one transaction for the delete of a, none for empty")
}

// suspendedRec is a config record of key that suspends it.
func suspendedRec(t testing.TB, topic string, key string, items int) *kgo.Record {
	r := configRec(t, topic, 0, key, items)
	r.Headers = []kgo.RecordHeader{{Key: extractor.SuspendedHeader, Value: []byte("true")}}
	return r
}

// TestWake: a woken config is polled at once, far ahead of its interval.
func TestWake(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, app := kafkatest.Name("cfg"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "a", 1), suspendedRec(t, cfgTopic, "off", 1))
	polled := make(chan time.Time, 10)
	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		if string(cfg.Key) == "off" {
			return errors.New("a suspended config was polled")
		}
		polled <- time.Now()
		return nil
	})
	r, rn := startRunner(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(time.Hour))
	select {
	case <-polled: // the first poll, at once
	case <-time.After(60 * time.Second):
		t.Fatalf("a not polled; extractor ended: %v", rn.ended())
	}
	require.False(t, r.Wake([]byte("missing")), "not a config")
	require.False(t, r.Wake([]byte("off")), "a suspended config")
	for range 3 {
		require.True(t, r.Wake([]byte("a")))
		select {
		case <-polled: // the interval is an hour: only the wake polls it
		case <-time.After(30 * time.Second):
			t.Fatal("a woken config was not polled")
		}
	}
	select {
	case <-polled:
		t.Fatal("polled without a wake")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, rn.stop(t))
	require.False(t, r.Wake([]byte("a")), "Run ended")
}

// TestSuspendResume: a suspended config is not polled and keeps its
// cursor; a record without the header resumes it from its cursor.
func TestSuspendResume(t *testing.T) {
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	c.Produce(t, configRec(t, cfgTopic, 0, "s", 1000))
	var (
		mu     sync.Mutex
		starts []cursor
	)
	one := pageFunc(out, 2, 1, nil) // one page per poll
	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		mu.Lock()
		starts = append(starts, cur)
		mu.Unlock()
		return one(ctx, cfg, cur, e)
	})
	started := func() []cursor {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(starts)
	}
	rn := start(t, c, ex, runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
		runner.PollInterval(20*time.Millisecond))
	kafkatest.WaitFor(t, 60*time.Second, "3 polls", func() bool {
		require.False(t, rn.ended(), "extractor ended: %v", rn.err)
		return len(started()) >= 3
	})

	c.Produce(t, suspendedRec(t, cfgTopic, "s", 1000))
	kafkatest.WaitFor(t, 30*time.Second, "polls stop", func() bool {
		n := len(started())
		time.Sleep(300 * time.Millisecond)
		return len(started()) == n
	})
	n := len(started())
	time.Sleep(time.Second)
	require.Len(t, started(), n, "a suspended config is not polled")
	c.WaitSettled(t, app+"-changelog") // the last page's markers
	cs := cursorsOf(t, c, app+"-changelog", "s")
	last := cs[len(cs)-1]

	c.Produce(t, configRec(t, cfgTopic, 0, "s", 1000))
	kafkatest.WaitFor(t, 30*time.Second, "polls resume", func() bool {
		require.False(t, rn.ended(), "extractor ended: %v", rn.err)
		return len(started()) > n+2
	})
	require.NoError(t, rn.stop(t))
	resumed, err := json.Marshal(started()[n])
	require.NoError(t, err)
	require.JSONEq(t, last, string(resumed), "the resumed poll starts from the cursor")
	got := started()
	require.Equal(t, 2*n, got[n].Next, "one page of two items per poll")
	recs := c.ReadCommitted(t, out)
	requireExactlyOnce(t, recs, map[string]int{"s": len(recs)})

	// An invalid header value is an error naming the record.
	cfgTopic2 := kafkatest.Name("cfg")
	c.CreateTopic(t, cfgTopic2, 1)
	bad := configRec(t, cfgTopic2, 0, "x", 1)
	bad.Headers = []kgo.RecordHeader{{Key: extractor.SuspendedHeader, Value: []byte("yes")}}
	c.Produce(t, bad)
	rn = start(t, c, ex, runner.ApplicationID(kafkatest.Name("app")), runner.ConfigTopics(cfgTopic2),
		runner.PollInterval(time.Hour))
	err = rn.wait(t, 60*time.Second)
	var rerr *configtopic.RecordError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, int64(0), rerr.Offset)
	require.Contains(t, err.Error(), extractor.SuspendedHeader)
}
