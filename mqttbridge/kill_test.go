package mqttbridge_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/flechtwerk/flechtwerk/internal/engine/bridge"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/mqtttest"
	"github.com/flechtwerk/flechtwerk/mqttbridge"
	"github.com/flechtwerk/flechtwerk/runner"
)

// Environment of the child process of TestKillBetweenReceiptCommitAndAck.
const (
	envKafka  = "FLECHTWERK_CHILD_BROKERS"
	envMQTT   = "FLECHTWERK_CHILD_MQTT"
	envApp    = "FLECHTWERK_CHILD_APP"
	envConfig = "FLECHTWERK_CHILD_CONFIG"
	envOut    = "FLECHTWERK_CHILD_OUT"
	envClient = "FLECHTWERK_CHILD_CLIENT"
	// envKill is "received:N" or "committed:N": SIGKILL the process itself
	// at that point of its Nth cycle; empty: never.
	envKill = "FLECHTWERK_CHILD_KILL"
	// envWindows is the file a killed child appends its window to.
	envWindows = "FLECHTWERK_CHILD_WINDOWS"
)

// recentAcks is how long after its PUBACKs were handed to the client a
// batch counts as in the window of a kill: they may not have reached the
// broker yet (the socket's send buffer is discarded when the killed
// process's connection is reset with unread data; seen under -race on a
// loaded machine: a copy of a message whose batch was acknowledged before
// the last one).
const recentAcks = 250 * time.Millisecond

// TestChildBridge is the bridge process that TestKillBetweenReceiptCommitAndAck
// kills. It appends one line to the windows file before it kills itself:
// "<point> cur=<payloads of the batch> prev=<payloads of the batches whose
// PUBACKs were handed to the client in the last recentAcks>".
func TestChildBridge(t *testing.T) {
	if os.Getenv(envKafka) == "" {
		t.Skip("helper process of TestKillBetweenReceiptCommitAndAck")
	}
	point, nth := "", 0
	if k := os.Getenv(envKill); k != "" {
		p, n, _ := strings.Cut(k, ":")
		point = p
		nth, _ = strconv.Atoi(n)
	}
	type acked struct {
		at  time.Time
		ids []string
	}
	var (
		cycles int
		recent []acked
	)
	ids := func(b []bridge.Message) []string {
		out := make([]string, len(b))
		for i, m := range b {
			out[i] = string(m.Payload)
		}
		return out
	}
	die := func(what string, cur []string) {
		var prev []string
		for _, a := range recent {
			if time.Since(a.at) <= recentAcks {
				prev = append(prev, a.ids...)
			}
		}
		f, err := os.OpenFile(os.Getenv(envWindows), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%s cur=%s prev=%s\n", what, strings.Join(cur, ","), strings.Join(prev, ","))
			_ = f.Sync()
			_ = f.Close()
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	// Every message matches the config: one the bridge dropped unrelayed
	// (as stale) and acknowledged would be lost.
	relay, relayed := relayTo(os.Getenv(envOut)), 0
	counted := func(c mqttbridge.Config[conf], m mqttbridge.Message) (*mqttbridge.Output, error) {
		relayed++
		return relay(c, m)
	}
	bridge.SetHook(func(p bridge.Point, b []bridge.Message) {
		switch p {
		case bridge.Received:
			cycles++
			if relayed != len(b) {
				fmt.Fprintf(os.Stderr, "child bridge: cycle %d relayed %d of its %d messages\n", cycles, relayed, len(b))
				os.Exit(3)
			}
			relayed = 0
			if point == "received" && cycles == nth {
				die("received", ids(b))
			}
		case bridge.Committed:
			if point == "committed" && cycles == nth {
				die("committed", ids(b))
			}
		case bridge.Acked:
			recent = append(recent, acked{time.Now(), ids(b)})
			for len(recent) > 0 && time.Since(recent[0].at) > recentAcks {
				recent = recent[1:]
			}
		}
	})
	b := mqttbridge.New(filterOf, counted,
		mqttbridge.Broker(os.Getenv(envMQTT)), mqttbridge.ClientID(os.Getenv(envClient)), mqttbridge.MaxBatch(50))
	r, err := runner.NewBridge(b,
		runner.SeedBrokers(os.Getenv(envKafka)),
		runner.ApplicationID(os.Getenv(envApp)),
		runner.ConfigTopics(os.Getenv(envConfig)),
		runner.WithLogger(logger()),
	)
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background())) // until SIGKILL
}

// TestKillBetweenReceiptCommitAndAck runs two replicas of one bridge on
// one shared subscription under a steady publisher: replica a in this
// process, replica b as child processes, each killed (SIGKILL) in its
// Nth cycle, alternately after the batch was received and relayed (before
// the commit) and after the commit (before the acknowledgements), then a
// last b that is not killed. A read_committed reader then finds every
// published message, and every extra copy is accounted for by a kill
// whose window held the message (its batch after the commit, and the
// batches whose PUBACKs were handed to the client within recentAcks); every message of a batch killed after
// its commit is there twice (committed, delivered again to the returning
// client id, committed again).
func TestKillBetweenReceiptCommitAndAck(t *testing.T) {
	if testing.Short() {
		t.Skip("kills subprocesses")
	}
	c := kafkatest.New(t)
	broker := mqtttest.Broker(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 3)
	base := kafkatest.Name("k")
	setConfig(t, c, cfgTopic, "all", base+"/#", false)
	windows := filepath.Join(t.TempDir(), "windows")

	child := func(kill string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildBridge$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			envKafka+"="+strings.Join(c.Brokers, ","), envMQTT+"="+broker, envApp+"="+app,
			envConfig+"="+cfgTopic, envOut+"="+out, envClient+"="+app+"-b", envKill+"="+kill, envWindows+"="+windows)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}

	// The first b subscribes before anything is published, so that the
	// share group has both members from the first message on.
	first := child("")
	a := start(t, c, broker, app, "a", cfgTopic, out, mqttbridge.MaxBatch(50))
	time.Sleep(time.Second)
	require.NoError(t, first.Process.Kill())
	_ = first.Wait()

	const n = 4000
	pub := mqtttest.NewPublisher(t, broker)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg     sync.WaitGroup
		pubErr error
	)
	wg.Add(1)
	go func() { // about 400 messages/s
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < n; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for j := 0; j < 4 && i < n; j, i = j+1, i+1 {
				tok := pub.PublishAsync(fmt.Sprintf("%s/d%d", base, i%16), fmt.Appendf(nil, "m%05d", i))
				if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
					pubErr = errors.Join(errors.New("publish failed"), tok.Error())
					return
				}
			}
		}
	}()

	const kills = 16
	killed := map[string]int{}
	for i := range kills {
		point := "received"
		if i%2 == 1 {
			point = "committed"
		}
		cmd := child(fmt.Sprintf("%s:%d", point, 1+rand.IntN(4)))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "child %d must die by SIGKILL", i)
			ws, ok := ee.Sys().(syscall.WaitStatus)
			require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child %d: %v", i, err)
			killed[point]++
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("child %d (%s) was not killed within 60s: no cycle ran", i, point)
		}
	}
	wg.Wait()
	require.NoError(t, pubErr)
	last := child("")
	lastDone := make(chan error, 1)
	go func() { lastDone <- last.Wait() }()
	t.Cleanup(func() { _ = last.Process.Kill(); <-lastDone })

	got := waitValues(t, c, out, n)
	var lost []string
	for i := range n {
		if id := fmt.Sprintf("m%05d", i); got[id] < 1 {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		// Whether a replica ended early tells a stopped bridge from a
		// lost message.
		select {
		case <-a.done:
			t.Errorf("replica a ended early: %v", a.err)
		default:
		}
		select {
		case err := <-lastDone:
			t.Errorf("the last b ended early: %v", err)
			lastDone <- err
		default:
		}
		for _, id := range lost[:min(len(lost), 5)] {
			t.Logf("%s: %s", id, mqtttest.Trail(broker, []byte(id)))
		}
		// A transaction left open holds the last stable offset below
		// the high watermark.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		lso, err1 := c.Adm.ListCommittedOffsets(ctx, out)
		hwm, err2 := c.Adm.ListEndOffsets(ctx, out)
		cancel()
		if err := errors.Join(err1, err2); err == nil {
			hwm.Each(func(o kadm.ListedOffset) {
				s, _ := lso.Lookup(out, o.Partition)
				t.Logf("%s/%d: last stable offset %d, high watermark %d", out, o.Partition, s.Offset, o.Offset)
			})
		}
	}
	require.Zero(t, len(lost), "%d of %d messages lost (first %v)", len(lost), n, lost[:min(len(lost), 20)])
	require.Zero(t, a.metric(t, "flechtwerk_mqtt_dropped_total", nil), "replica a dropped messages")
	a.stop(t)

	// Every extra copy is accounted for by a kill whose window held it.
	raw, err := os.ReadFile(windows)
	require.NoError(t, err)
	inWindow := map[string]int{}
	committedCur := map[string]int{}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, kills, "one window line per kill")
	for _, line := range lines {
		f := strings.Fields(line)
		require.Len(t, f, 3, line)
		cur := split(strings.TrimPrefix(f[1], "cur="))
		for _, id := range append(cur, split(strings.TrimPrefix(f[2], "prev="))...) {
			inWindow[id]++
		}
		if f[0] == "committed" {
			for _, id := range cur {
				committedCur[id]++
			}
		}
	}
	dups := 0
	for id, k := range got {
		if k > 1 {
			dups += k - 1
			require.LessOrEqual(t, k-1, inWindow[id], "%s has %d copies and was in %d kill windows", id, k, inWindow[id])
		}
	}
	for id, k := range committedCur {
		require.GreaterOrEqual(t, got[id], 1+k, "%s was committed and not acknowledged by %d killed processes: delivered again each time", id, k)
	}
	require.Equal(t, kills/2, killed["received"])
	require.Equal(t, kills/2, killed["committed"])
	require.NotEmpty(t, committedCur, "some kill landed after a commit with records")
	t.Logf("%d messages, %d kills (%v), %d duplicates, %d messages in commit→ack windows", n, kills, killed, dups, len(committedCur))

	// Closing the window: Dedupe over the bridge's output, keyed by
	// publisher (the MQTT topic) and its sequence numbers, leaves every
	// message exactly once.
	deduped := kafkatest.Name("dedup")
	c.CreateTopic(t, deduped, 3)
	dr, err := runner.NewTransformer(mqttbridge.Dedupe(deduped, 0), runner.SeedBrokers(c.Brokers...), runner.ApplicationID(kafkatest.Name("dedupe")),
		runner.InputTopics(out), runner.StateDir(t.TempDir()), runner.WithKafkaOpts(c.Opts()...), runner.WithLogger(logger()))
	require.NoError(t, err)
	dctx, dcancel := context.WithCancel(context.Background())
	ddone := make(chan error, 1)
	go func() { ddone <- dr.Run(dctx) }()
	once := waitValues(t, c, deduped, n)
	dcancel()
	require.NoError(t, <-ddone)
	for i := range n {
		require.Equal(t, 1, once[fmt.Sprintf("m%05d", i)], "m%05d after Dedupe", i)
	}
	require.Len(t, once, n)
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
