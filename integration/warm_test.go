package integration

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task"
)

// warmChildEnv makes the test binary a child task owner (see
// TestMain): it restores the store of partition 0 of an application,
// commits transactions the way a task does (EndTxn, then ApplyThrough with
// the changelog offset after the transaction's last record), says "ready"
// and waits to be killed.
const warmChildEnv = "FLECHTWERK_WARM_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(warmChildEnv); spec != "" {
		os.Exit(warmChild(spec))
	}
	os.Exit(m.Run())
}

// warmChild runs the owner described by spec: "brokers|app|dir|txns|perTxn".
func warmChild(spec string) int {
	var brokers, app, dir string
	var txns, per int
	parts := strings.Split(spec, "|")
	brokers, app, dir = parts[0], parts[1], parts[2]
	fmt.Sscan(parts[3], &txns)
	fmt.Sscan(parts[4], &per)
	ctx := context.Background()
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...)}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	o := &owner{app: app, dir: dir, opts: opts, adm: kadm.NewClient(cl)}
	if err := o.start(ctx); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := o.commitN(ctx, 0, txns, per); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

// owner is a stateful task owner of partition 0, reduced to its store
// path: fence, restore, and per transaction a commit followed by the
// store update with its checkpoint, as task.Commit makes it.
type owner struct {
	app, dir string
	opts     []kgo.Opt
	adm      *kadm.Client
	p        *txn.Producer
	st       *store.Store
	res      changelog.Result
}

func (o *owner) start(ctx context.Context) error {
	p, err := txn.Open(ctx, o.app+"-0", time.Minute, changelog.Topic(o.app), o.opts...)
	if err != nil {
		return err
	}
	o.p = p
	if o.dir == "" {
		return nil // an owner without a store (elsewhere)
	}
	st, err := store.Open(ctx, store.Dir(o.dir, o.app, 0), store.Options{ApplicationID: o.app})
	if err != nil {
		return err
	}
	o.st = st
	o.res, err = changelog.Recover(ctx, o.adm, changelog.Topic(o.app), 0, st, o.opts...)
	return err
}

// commitN commits txns transactions of per state writes each: keys
// k{first+i*per+j mod 300} get values naming the write, every fifth key a
// tombstone.
func (o *owner) commitN(ctx context.Context, first, txns, per int) error {
	topic := changelog.Topic(o.app)
	for i := range txns {
		var ws []store.Write
		for j := range per {
			n := first + i*per + j
			w := store.Write{Key: fmt.Appendf(nil, "k%d", n%300)}
			if n%5 == 4 {
				w.Delete = true
			} else {
				w.Value = fmt.Appendf(nil, "v%d", n)
			}
			ws = append(ws, w)
		}
		recs := make([]*kgo.Record, 0, len(ws))
		for _, w := range ws {
			recs = append(recs, changelog.Record(topic, 0, w))
		}
		if _, err := o.p.Commit(ctx, recs, nil); err != nil {
			return err
		}
		if o.st == nil {
			continue
		}
		// The commit-side call of a task, after EndTxn.
		next, ok := changelog.NextOffset(recs, topic, 0)
		if !ok {
			return fmt.Errorf("no changelog offset")
		}
		if err := o.st.ApplyThrough(ws, next); err != nil {
			return err
		}
	}
	return nil
}

func (o *owner) close() {
	if o.p != nil {
		o.p.Close()
	}
	_ = o.st.Close()
}

// coldState restores the changelog partition into a fresh store and
// returns its contents: the state every restore must end with.
func coldState(t *testing.T, c *kafkatest.Cluster, app string) (map[string]string, int) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "cold"), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	n, err := changelog.Restore(context.Background(), c.Adm, changelog.Topic(app), 0, st, kgo.SeedBrokers(c.Brokers...))
	require.NoError(t, err)
	return contents(t, st), n
}

// TestWarmRestartReplaysOnlyTail: a task owner commits 1000 state writes
// and stops (cleanly, or by SIGKILL of its process); another owner
// elsewhere commits 37 more. The task restarting on the first owner's
// directory (task.Start fences, task.Restore restores) replays exactly
// those 37 records, not the partition, and ends with the state of a full
// restore.
func TestWarmRestartReplaysOnlyTail(t *testing.T) {
	for _, kill := range []bool{false, true} {
		name := "clean stop"
		if kill {
			name = "SIGKILL"
		}
		t.Run(name, func(t *testing.T) {
			c := kafkatest.New(t)
			app := kafkatest.Name("warm")
			c.CreateTopic(t, changelog.Topic(app), 1)
			dir := t.TempDir()
			ctx := context.Background()
			opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}

			if kill {
				child := exec.Command(os.Args[0], "-test.run=^$")
				child.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s|%d|%d", warmChildEnv, strings.Join(c.Brokers, ","), app, dir, 20, 50))
				child.Stderr = os.Stderr
				stdout, err := child.StdoutPipe()
				require.NoError(t, err)
				require.NoError(t, child.Start())
				out := bufio.NewScanner(stdout)
				require.True(t, out.Scan(), "child output")
				require.Equal(t, "ready", out.Text())
				require.NoError(t, child.Process.Signal(syscall.SIGKILL))
				_ = child.Wait()
			} else {
				o := &owner{app: app, dir: dir, opts: opts, adm: c.Adm}
				require.NoError(t, o.start(ctx))
				require.True(t, o.res.Full, "the first owner restores in full")
				require.NoError(t, o.commitN(ctx, 0, 20, 50))
				o.close()
			}
			// Another owner, with no store here, commits the tail.
			other := &owner{app: app, opts: opts, adm: c.Adm}
			require.NoError(t, other.start(ctx))
			require.NoError(t, other.commitN(ctx, 1000, 1, 37))
			other.p.Close()

			proc, ok := stage.TransformerOf(counter(app + "-out"))
			require.True(t, ok)
			var logs kafkatest.LogBuffer
			tk, err := task.Start(ctx, task.Config{
				ApplicationID: app, Partition: 0, InputTopics: []string{app + "-in"},
				Changelog: changelog.Topic(app), StateDir: dir, TransactionTimeout: time.Minute,
				KafkaOpts: opts, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			}, proc)
			require.NoError(t, err)
			defer tk.Close()
			require.NoError(t, tk.Restore(ctx, c.Adm))
			require.Contains(t, logs.String(), `msg="task restored" partition=0`)
			require.Contains(t, logs.String(), "records=37 ", "only the tail is replayed: %s", logs.String())
			require.Contains(t, logs.String(), "full=false", logs.String())

			want, all := coldState(t, c, app)
			require.Equal(t, 1037, all, "a full restore replays the whole partition")
			require.Equal(t, want, contents(t, tk.Store()))
		})
	}
}

// TestUnusableCheckpointRestoresFully: a store whose checkpoint cannot be
// replayed from is wiped and restored from the log start, ending with the
// changelog's state.
func TestUnusableCheckpointRestoresFully(t *testing.T) {
	tests := []struct {
		name string
		// spoil runs after the first owner committed and closed its
		// store; it may commit more through other.
		spoil  func(t *testing.T, c *kafkatest.Cluster, app, dir string, other *owner)
		reason string
	}{
		{"topic recreated", func(t *testing.T, c *kafkatest.Cluster, app, _ string, other *owner) {
			topic := changelog.Topic(app)
			_, err := c.Adm.DeleteTopic(context.Background(), topic)
			require.NoError(t, err)
			kafkatest.WaitFor(t, 20*time.Second, "topic deleted", func() bool {
				d, err := c.Adm.ListTopics(kadm.WithAuthorizedOps(context.Background()), topic)
				return err == nil && !d.Has(topic)
			})
			c.CreateTopic(t, topic, 1)
			// More records than before: the old checkpoint is inside the
			// new topic's range, so only the ID can tell.
			require.NoError(t, other.start(context.Background()))
			require.NoError(t, other.commitN(context.Background(), 5000, 30, 50))
		}, "topic was recreated"},
		{"checkpoint ahead of the last stable offset", func(t *testing.T, c *kafkatest.Cluster, app, dir string, _ *owner) {
			// A store copied from a later state: its checkpoint lies
			// beyond what the changelog holds.
			st, err := store.Open(context.Background(), store.Dir(dir, app, 0), store.Options{ApplicationID: app})
			require.NoError(t, err)
			cp, ok := st.Checkpoint()
			require.True(t, ok)
			require.NoError(t, st.ApplyThrough([]store.Write{{Key: []byte("later"), Value: []byte("x")}}, cp.Next+500))
			require.NoError(t, st.Close())
		}, "ahead of the last stable offset"},
		{"checkpoint below the log start", func(t *testing.T, c *kafkatest.Cluster, app, _ string, other *owner) {
			require.NoError(t, other.start(context.Background()))
			require.NoError(t, other.commitN(context.Background(), 1000, 4, 50))
			topic := changelog.Topic(app)
			end := lastStable(t, c, topic, 0)
			os := kadm.Offsets{}
			os.Add(kadm.Offset{Topic: topic, Partition: 0, At: end - 120})
			resp, err := c.Adm.DeleteRecords(context.Background(), os)
			require.NoError(t, err)
			require.NoError(t, resp.Error())
		}, "below the log start"},
		{"store older than delete.retention.ms", func(t *testing.T, c *kafkatest.Cluster, app, _ string, _ *owner) {
			resp, err := c.Adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{
				{Op: kadm.SetConfig, Name: "delete.retention.ms", Value: kadm.StringPtr("1500")},
			}, changelog.Topic(app))
			require.NoError(t, err)
			for _, r := range resp {
				require.NoError(t, r.Err)
			}
			time.Sleep(1500 * time.Millisecond)
		}, "delete.retention.ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			app := kafkatest.Name("unusable")
			c.CreateTopic(t, changelog.Topic(app), 1)
			dir := t.TempDir()
			ctx := context.Background()
			opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
			o := &owner{app: app, dir: dir, opts: opts, adm: c.Adm}
			require.NoError(t, o.start(ctx))
			require.NoError(t, o.commitN(ctx, 0, 20, 50))
			o.close()

			other := &owner{app: app, opts: opts, adm: c.Adm}
			tc.spoil(t, c, app, dir, other)
			if other.p != nil {
				other.p.Close()
			}

			again := &owner{app: app, dir: dir, opts: opts, adm: c.Adm}
			require.NoError(t, again.start(ctx))
			defer again.close()
			require.True(t, again.res.Full, "full restore")
			require.Contains(t, again.res.Reason, tc.reason)
			want, n := coldState(t, c, app)
			require.Equal(t, n, again.res.Records, "replayed from the log start")
			require.Equal(t, want, contents(t, again.st))
		})
	}
}
