package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/admin"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the admin command against c with args; stdin is the answer to
// a confirmation prompt.
func cli(t testing.TB, c *kafkatest.Cluster, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	full := append([]string{}, args...)
	full = append(full, "--brokers", strings.Join(c.Brokers, ","), "--timeout", "60s")
	code := admin.Run(context.Background(), full, admin.Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		Getenv: func(string) string { return "" },
	})
	t.Logf("flechtwerk %s -> %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return result{code, out.String(), errOut.String()}
}

// app is a running counter application.
type app struct {
	cancel context.CancelFunc
	exited chan struct{} // closed when Run returned
	err    error         // Run's result, once exited
}

func (a *app) stop(t testing.TB) {
	t.Helper()
	a.cancel()
	select {
	case <-a.exited:
		require.NoError(t, a.err, "runner")
	case <-time.After(60 * time.Second):
		t.Fatal("runner did not stop within 60s")
	}
}

// counter counts records per key, emits "key=count" to out; a record with
// value "del" deletes the key's state and emits nothing.
func counter(out string) *transformer.Stage[int] {
	return transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		if string(rec.Value) == "del" {
			e.DeleteState()
			return nil
		}
		n++
		e.SetState(n)
		e.Send(out, rec.Key, []byte(strconv.Itoa(n)))
		return nil
	})
}

func startApp(t testing.TB, c *kafkatest.Cluster, id, in, out string) *app {
	t.Helper()
	return startAppIn(t, c, id, in, out, t.TempDir())
}

// startAppIn starts the counter application with state directory dir.
func startAppIn(t testing.TB, c *kafkatest.Cluster, id, in, out, dir string) *app {
	t.Helper()
	r, err := runner.NewTransformer(counter(out),
		runner.SeedBrokers(c.Brokers...),
		runner.ApplicationID(id),
		runner.InputTopics(in),
		runner.StateDir(dir),
		runner.SessionTimeout(6*time.Second))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	a := &app{cancel: cancel, exited: make(chan struct{})}
	go func() {
		a.err = r.Run(ctx)
		close(a.exited)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-a.exited:
		case <-time.After(60 * time.Second):
		}
	})
	return a
}

// produceKeyed writes values of keys with Kafka's default partitioner
// (murmur2 of the key), as a producer that knows nothing of Flechtwerk
// would.
func produceKeyed(t testing.TB, c *kafkatest.Cluster, topic string, kvs ...[2]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ProducerLinger(0))
	require.NoError(t, err)
	defer cl.Close()
	recs := make([]*kgo.Record, len(kvs))
	for i, kv := range kvs {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(kv[0]), Value: []byte(kv[1])}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// counts returns n records spread over keys k0..k(keys-1).
func counts(n, keys int) [][2]string {
	out := make([][2]string, n)
	for i := range n {
		out[i] = [2]string{fmt.Sprintf("k%d", i%keys), strconv.Itoa(i)}
	}
	return out
}

// waitLag0 waits until the group's committed offsets of topic equal its
// end offsets.
func waitLag0(t testing.TB, c *kafkatest.Cluster, group, topic string, a *app) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ends := c.EndOffsets(t, topic)
		got := c.CommittedOffsets(t, group, topic)
		ok := true
		for p, end := range ends {
			if end > 0 && got[p] != end {
				ok = false
			}
		}
		if ok {
			return
		}
		select {
		case <-a.exited:
			t.Fatalf("runner ended while waiting for lag 0: %v", a.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag not 0: committed %v, ends %v", got, ends)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitMembers waits until group has n members.
func waitMembers(t testing.TB, c *kafkatest.Cluster, group string, n int) {
	t.Helper()
	kafkatest.WaitFor(t, 60*time.Second, fmt.Sprintf("%d members in group %s", n, group), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gs, err := c.Adm.DescribeGroups(ctx, group)
		if err != nil {
			return false
		}
		g := gs[group]
		return g.Err == nil && len(g.Members) == n && (n == 0 || g.State == "Stable")
	})
}

// readAll waits until topic has no open transaction and returns its
// committed records.
func readAll(t testing.TB, c *kafkatest.Cluster, topic string) []*kgo.Record {
	t.Helper()
	kafkatest.WaitFor(t, 30*time.Second, "no open transaction on "+topic, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lso, err := c.Adm.ListCommittedOffsets(ctx, topic)
		require.NoError(t, err)
		hwm, err := c.Adm.ListEndOffsets(ctx, topic)
		require.NoError(t, err)
		stable := true
		hwm.Each(func(o kadm.ListedOffset) {
			if l, ok := lso.Lookup(topic, o.Partition); !ok || l.Offset != o.Offset {
				stable = false
			}
		})
		return stable
	})
	return c.ReadCommitted(t, topic)
}

// waitTransactionsEnded waits until the transaction coordinator reports
// the last transaction of each of app's tasks 0..tasks-1 complete, not
// open (Ongoing) nor being ended (PrepareCommit, PrepareAbort): EndTxn
// returns before the markers are written and the coordinator completes
// the transaction after them, so a transaction whose offsets are visible
// may still be PrepareCommit.
func waitTransactionsEnded(t testing.TB, c *kafkatest.Cluster, app string, tasks int32) {
	t.Helper()
	ids := make([]string, tasks)
	for n := range tasks {
		ids[n] = fencing.TransactionalID(app, n)
	}
	kafkatest.WaitFor(t, 30*time.Second, fmt.Sprintf("the transactions of %v complete", ids), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		described, err := c.Adm.DescribeTransactions(ctx, ids...)
		if err != nil {
			return false
		}
		for _, id := range ids {
			d, ok := described[id]
			if !ok || d.Err != nil {
				return false
			}
			switch d.State {
			case "Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence":
				return false
			}
		}
		return true
	})
}
