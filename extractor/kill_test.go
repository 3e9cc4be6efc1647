package extractor_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// Environment of the child process of TestKillMidPage.
const (
	envBrokers = "FLECHTWERK_CHILD_BROKERS"
	envApp     = "FLECHTWERK_CHILD_APP"
	envConfig  = "FLECHTWERK_CHILD_CONFIG"
	envOut     = "FLECHTWERK_CHILD_OUT"
	envState   = "FLECHTWERK_CHILD_STATE"
)

// killPageSize is the page size of TestKillMidPage.
const killPageSize = 3

// slowPager reads every page of a config in one poll, a little slowly, so
// that a kill lands mid-page or mid-commit.
func slowPager(out string) *extractor.Stage[conf, cursor] {
	return extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		for cur.Next < cfg.Config.Items {
			end := min(cur.Next+killPageSize, cfg.Config.Items)
			for i := cur.Next; i < end; i++ {
				e.Send(out, cfg.Key, []byte(item(string(cfg.Key), i)))
				time.Sleep(time.Millisecond)
			}
			cur.Next = end
			if err := e.Commit(ctx, cur); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestChildProcess is the extractor process that TestKillMidPage kills.
func TestChildProcess(t *testing.T) {
	if os.Getenv(envBrokers) == "" {
		t.Skip("helper process of TestKillMidPage")
	}
	r, err := runner.NewExtractor(slowPager(os.Getenv(envOut)),
		runner.SeedBrokers(os.Getenv(envBrokers)),
		runner.ApplicationID(os.Getenv(envApp)),
		runner.ConfigTopics(os.Getenv(envConfig)),
		runner.StateDir(os.Getenv(envState)),
		runner.PollInterval(time.Hour),
		runner.SessionTimeout(2*time.Second),
		runner.WithLogger(logger()),
	)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background())) // until SIGKILL
}

// TestKillMidPage SIGKILLs extractor processes while they page through
// their sources, then runs one to the end. A read_committed reader sees
// every item exactly once, and every config resumes from the cursor of the
// last page that became visible.
func TestKillMidPage(t *testing.T) {
	if testing.Short() {
		t.Skip("kills subprocesses")
	}
	c := kafkatest.New(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 2)
	c.CreateTopic(t, out, 2)
	const configs, items = 4, 600
	want := map[string]int{}
	var recs []*kgo.Record
	for i := range configs {
		key := fmt.Sprintf("k%d", i)
		want[key] = items
		recs = append(recs, configRec(t, cfgTopic, int32(i%2), key, items))
	}
	c.Produce(t, recs...)

	for round := range 3 {
		before := countVisible(t, c, out)
		var output bytes.Buffer
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.v")
		cmd.Env = append(os.Environ(),
			envBrokers+"="+c.Brokers[0], envApp+"="+app, envConfig+"="+cfgTopic, envOut+"="+out,
			envState+"="+t.TempDir())
		cmd.Stdout, cmd.Stderr = &output, &output
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		kafkatest.WaitFor(t, 90*time.Second, fmt.Sprintf("round %d: child makes progress", round), func() bool {
			select {
			case <-exited:
				t.Fatalf("child exited early:\n%s", output.String())
			default:
			}
			return countVisible(t, c, out) >= before+10*killPageSize
		})
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
		require.NoError(t, cmd.Process.Kill())
		<-exited
		t.Logf("round %d: killed with %d items visible", round, countVisible(t, c, out))
	}

	// The last killed process's last transaction may be committed with
	// its markers not yet written, or open: fence both tokens (a commit
	// under way completes, an open transaction aborts) and wait for the
	// markers, so what is read below is what the next owner resumes from.
	c.FenceTasks(t, app, 2)
	c.WaitSettled(t, out)

	// What is visible now is a prefix of each source, made of whole pages.
	visible := map[string]int{}
	for key, vs := range values(c.ReadCommitted(t, out)) {
		visible[key] = len(vs)
		require.Zero(t, len(vs)%killPageSize, "config %s: a partial page is visible", key)
	}
	require.Less(t, len(c.ReadCommitted(t, out)), configs*items, "the kills must land before the end")

	var (
		mu      sync.Mutex
		resumed = map[string]int{}
	)
	final := start(t, c, extractor.New(func(ctx context.Context, cfg extractor.Config[conf], cur cursor, e *extractor.Emitter[cursor]) error {
		mu.Lock()
		if _, ok := resumed[string(cfg.Key)]; !ok {
			resumed[string(cfg.Key)] = cur.Next
		}
		mu.Unlock()
		for cur.Next < cfg.Config.Items {
			end := min(cur.Next+killPageSize, cfg.Config.Items)
			for i := cur.Next; i < end; i++ {
				e.Send(out, cfg.Key, []byte(item(string(cfg.Key), i)))
			}
			cur.Next = end
			if err := e.Commit(ctx, cur); err != nil {
				return err
			}
		}
		return nil
	}), runner.ApplicationID(app), runner.ConfigTopics(cfgTopic), runner.PollInterval(time.Hour))
	kafkatest.WaitFor(t, 90*time.Second, "all items visible", func() bool {
		require.False(t, final.ended(), "extractor ended: %v", final.err)
		return countVisible(t, c, out) >= configs*items
	})
	require.NoError(t, final.stop(t))
	requireExactlyOnce(t, c.ReadCommitted(t, out), want)
	mu.Lock()
	defer mu.Unlock()
	for key := range want {
		require.Equal(t, visible[key], resumed[key], "config %s resumes after its last visible page", key)
	}
}
