package extractor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// conf is the config value of the tests: a source of Items items.
type conf struct{ Items int }

// cursor is the tests' cursor: the next item to read.
type cursor struct{ Next int }

// running is a Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// stop cancels Run and returns its result.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	return r.wait(t, 60*time.Second)
}

// wait waits for Run to end by itself.
func (r *running) wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(timeout):
		t.Fatalf("extractor did not stop within %v", timeout)
		return nil
	}
}

func (r *running) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func logger() *slog.Logger {
	if os.Getenv("FLECHTWERK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// start runs an extractor until the test ends.
func start(t testing.TB, c *kafkatest.Cluster, ex runner.Stage, opts ...runner.ExtractorOpt) *running {
	t.Helper()
	_, rn := startRunner(t, c, ex, opts...)
	return rn
}

// startRunner is start that also returns the Runner.
func startRunner(t testing.TB, c *kafkatest.Cluster, ex runner.Stage, opts ...runner.ExtractorOpt) (*runner.Runner, *running) {
	t.Helper()
	all := append([]runner.ExtractorOpt{
		runner.SeedBrokers(c.Brokers...),
		runner.SessionTimeout(6 * time.Second),
		runner.StateDir(t.TempDir()),
		runner.WithLogger(logger()),
	}, opts...)
	r, err := runner.NewExtractor(ex, all...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		rn.err = r.Run(ctx)
		close(rn.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rn.done:
		case <-time.After(60 * time.Second):
			t.Error("extractor did not stop within 60s")
		}
	})
	return r, rn
}

// configRec is a config record of key on partition p.
func configRec(t testing.TB, topic string, p int32, key string, items int) *kgo.Record {
	t.Helper()
	v, err := json.Marshal(conf{Items: items})
	require.NoError(t, err)
	return &kgo.Record{Topic: topic, Partition: p, Key: []byte(key), Value: v}
}

// item is the value of item i of config key.
func item(key string, i int) string { return fmt.Sprintf("%s-%d", key, i) }

// pager returns a poll function that reads up to maxPages pages of
// pageSize items per poll from a config's source, sends them to out keyed by
// the config key and commits the cursor after each page. hook, when set,
// runs after a page's records were sent and before its Commit.
func pager(out string, pageSize, maxPages int, hook func(ctx context.Context, key string, cur cursor) error) *extractor.Stage[conf, cursor] {
	return extractor.New(pageFunc(out, pageSize, maxPages, hook))
}

// pageFunc is the poll function of pager.
func pageFunc(out string, pageSize, maxPages int, hook func(ctx context.Context, key string, cur cursor) error) extractor.Func[conf, cursor] {
	return func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		key := string(cfg.Key)
		for p := 0; p < maxPages && cur.Next < cfg.Config.Items; p++ {
			end := min(cur.Next+pageSize, cfg.Config.Items)
			for i := cur.Next; i < end; i++ {
				e.Send(out, cfg.Key, []byte(item(key, i)))
			}
			if hook != nil {
				if err := hook(ctx, key, cur); err != nil {
					return err
				}
			}
			cur.Next = end
			if err := e.Commit(ctx, cur); err != nil {
				return err
			}
		}
		return nil
	}
}

// values groups the values of recs by key.
func values(recs []*kgo.Record) map[string][]string {
	out := map[string][]string{}
	for _, r := range recs {
		out[string(r.Key)] = append(out[string(r.Key)], string(r.Value))
	}
	return out
}

// requireExactlyOnce checks that recs hold items 0..n-1 of every key in want
// exactly once, and nothing else.
func requireExactlyOnce(t testing.TB, recs []*kgo.Record, want map[string]int) {
	t.Helper()
	got := values(recs)
	for key, n := range want {
		seen := map[string]int{}
		for _, v := range got[key] {
			seen[v]++
		}
		for i := range n {
			require.Equal(t, 1, seen[item(key, i)], "config %s: item %d seen %d times", key, i, seen[item(key, i)])
		}
		require.Len(t, got[key], n, "config %s: unexpected items %v", key, got[key])
	}
	for key := range got {
		_, ok := want[key]
		require.True(t, ok, "records of unexpected key %s", key)
	}
}

// countVisible returns the number of read_committed records of topic.
func countVisible(t testing.TB, c *kafkatest.Cluster, topic string) int {
	return len(c.ReadCommitted(t, topic))
}

// polls records which instance polled which config when.
type polls struct {
	mu  sync.Mutex
	log []pollEntry
}

type pollEntry struct {
	instance string
	key      string
	at       time.Time
}

func (p *polls) add(instance, key string) {
	p.mu.Lock()
	p.log = append(p.log, pollEntry{instance, key, time.Now()})
	p.mu.Unlock()
}

func (p *polls) count(instance string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.log {
		if instance == "" || e.instance == instance {
			n++
		}
	}
	return n
}

func (p *polls) countKey(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.log {
		if e.key == key {
			n++
		}
	}
	return n
}

func (p *polls) since(t time.Time) []pollEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pollEntry
	for _, e := range p.log {
		if !e.at.Before(t) {
			out = append(out, e)
		}
	}
	return out
}
