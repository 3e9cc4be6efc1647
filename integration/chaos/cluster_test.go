package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestChaosClusterFaults runs the chaos of TestChaosExactlyOnce (processors
// SIGKILLed, frozen into zombies, stopped) against the three-broker cluster
// of integration/kafka/cluster.sh while, at the same time,
//
//   - brokers are SIGKILLed and restarted: the leader of an input
//     partition, of an output partition, of a changelog partition and the
//     transaction coordinator of a task ({app}-{N});
//   - a broker is frozen (SIGSTOP) past broker.session.timeout.ms, so the
//     controller fences it, and then woken;
//   - preferred leader elections are forced the moment a processor starts
//     restoring its tasks (leaders moved by the faults move back);
//   - the processors reach every broker through its own fault-injecting
//     proxy (toxiproxy, in-process) that cuts all connections, stalls them
//     and adds latency.
//
// At most one broker is down or frozen at a time, and a broker fault waits
// until every partition of the run (and of __consumer_offsets and
// __transaction_state) has its 3 replicas back in sync: with min ISR 2 the
// cluster stays writable. The verification is TestChaosExactlyOnce's.
//
// It runs when KAFKA_CLUSTER names the cluster's directory (cluster.sh
// start's <dir>) and KAFKA_BROKERS its direct bootstrap; see
// integration/kafka/test-cluster.sh. Sizes: the CHAOS_* variables, plus
// CHAOS_BROKER_KILLS (default 4), CHAOS_BROKER_FREEZES (1),
// CHAOS_ELECTIONS (2) and CHAOS_CONN_EVERY (mean gap between connection
// faults, 6s). CHAOS_KILLS defaults to 10 here.
func TestChaosClusterFaults(t *testing.T) {
	dir := os.Getenv("KAFKA_CLUSTER")
	if dir == "" {
		t.Skip("KAFKA_CLUSTER is not set: this test needs the three-broker cluster of integration/kafka/cluster.sh; run integration/kafka/test-cluster.sh (make test-cluster)")
	}
	require.NotEmpty(t, os.Getenv("KAFKA_BROKERS"), "KAFKA_BROKERS must be the cluster's direct bootstrap (%s/bootstrap)", dir)
	if os.Getenv("CHAOS_KILLS") == "" {
		t.Setenv("CHAOS_KILLS", "10")
	}
	cfg := loadConfig(t, "sequencer")
	require.GreaterOrEqual(t, cfg.partitions, int32(6), "CHAOS_PARTITIONS: the chaos suite needs at least 6 partitions")
	bc := clusterConfig{
		kills:     envInt(t, "CHAOS_BROKER_KILLS", 4),
		freezes:   envInt(t, "CHAOS_BROKER_FREEZES", 1),
		elections: envInt(t, "CHAOS_ELECTIONS", 2),
		connEvery: envDuration(t, "CHAOS_CONN_EVERY", 6*time.Second),
	}
	// Broker faults take a restart and an ISR catch-up each: pace the
	// inputs (and size the timeout) for them.
	brokerFaults := time.Duration(bc.kills + bc.freezes + bc.elections)
	if os.Getenv("CHAOS_DURATION") == "" {
		cfg.duration = max(cfg.duration, brokerFaults*25*time.Second)
	}
	if os.Getenv("CHAOS_TIMEOUT") == "" {
		cfg.timeout += cfg.duration + brokerFaults*time.Minute
	}

	cl := openCluster(t, dir)
	h := newHarness(t, cfg)
	cl.h = h
	cl.cfg = bc
	cl.rng = newRNG(cfg.seed ^ 0x5bd1e995)
	t.Logf("chaos: cluster %s: brokers %v, processors through proxies %v; broker kills=%d freezes=%d elections=%d, a connection fault every ~%v",
		dir, h.c.Brokers, cl.proxied(), bc.kills, bc.freezes, bc.elections, bc.connEvery)
	cl.startProxies(t)
	h.procBrokers = cl.proxied()
	h.sideChaos = append(h.sideChaos, cl.brokerChaos)
	h.bgChaos = append(h.bgChaos, cl.connChaos)
	h.summaryExtra = cl.summary

	res := h.run()
	line := summary(h, res)
	t.Log(line)
	fmt.Println(line)
	for _, n := range cl.notes() {
		t.Logf("chaos: %s", n)
	}

	for _, p := range res.problems {
		t.Errorf("chaos: %s", p)
	}
	require.Zero(t, res.duplicates, "duplicates")
	require.Zero(t, res.gaps, "gaps")
	require.True(t, res.seqExact, "every key's seq runs exactly 1..count")
	require.True(t, res.stateExact, "restored state equals the counts")
	require.True(t, res.offsetsExact, "committed offsets equal the input end offsets")
	require.GreaterOrEqual(t, int(h.fleet.kills.Load()), cfg.kills, "processor kills that landed")
	require.Len(t, h.zombieNotes, cfg.zombies, "zombies")
	require.Empty(t, h.stopFailures, "graceful stops under chaos end cleanly")
	require.GreaterOrEqual(t, int(cl.brokerKills.Load()), bc.kills, "broker kills that landed")
	require.GreaterOrEqual(t, int(cl.freezes.Load()), bc.freezes, "brokers frozen")
	require.Equal(t, cl.freezes.Load(), cl.fencings.Load(), "every frozen broker was fenced by the controller (frozen past broker.session.timeout.ms)")
	require.GreaterOrEqual(t, int(cl.elections.Load()), bc.elections, "forced leader elections")
	require.Positive(t, cl.cuts.Load(), "connection cuts")
	require.Positive(t, cl.resets.Load(), "connection resets")
	require.Positive(t, cl.stalls.Load(), "connection stalls")
	require.Positive(t, cl.latencies.Load(), "latency spells")
}

type clusterConfig struct {
	kills, freezes, elections int
	connEvery                 time.Duration
}

// brokerNode is one node of the cluster (see cluster.sh's nodes file).
type brokerNode struct {
	id                        int32
	dir                       string // <cluster>/node-<id>
	internal, external, proxy string // host:port
	proxyCtl                  *connProxy
	down                      atomic.Bool // killed, not yet restarted, or frozen
	frozenPID                 atomic.Int64
}

// cluster controls the nodes of cluster.sh's cluster and the proxies in
// front of them, and runs the broker and connection faults.
type cluster struct {
	t      testing.TB
	dir    string
	script string
	nodes  []*brokerNode
	h      *harness
	cfg    clusterConfig
	rng    *rng

	brokerKills, freezes, fencings  atomic.Int64
	elections                       atomic.Int64
	cuts, resets, stalls, latencies atomic.Int64
	// broker is held by a broker fault: at most one broker down at a time.
	broker sync.Mutex

	mu      sync.Mutex
	noteLog []string
}

func openCluster(t testing.TB, dir string) *cluster {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "kafka", "cluster.sh"))
	require.NoError(t, err)
	require.FileExists(t, script)
	f, err := os.Open(filepath.Join(dir, "nodes"))
	require.NoError(t, err, "KAFKA_CLUSTER=%s: not a cluster.sh directory", dir)
	defer f.Close()
	c := &cluster{t: t, dir: dir, script: script}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		require.Len(t, fs, 5, "%s/nodes: line %q", dir, sc.Text())
		id, err := strconv.Atoi(fs[0])
		require.NoError(t, err, "%s/nodes: line %q", dir, sc.Text())
		c.nodes = append(c.nodes, &brokerNode{
			id: int32(id), dir: filepath.Join(dir, "node-"+fs[0]),
			internal: "127.0.0.1:" + fs[1], external: "127.0.0.1:" + fs[2], proxy: "127.0.0.1:" + fs[3],
		})
	}
	require.NoError(t, sc.Err())
	require.Len(t, c.nodes, 3, "%s/nodes: the cluster chaos needs three brokers", dir)
	t.Cleanup(func() {
		// Never leave a broker frozen or down behind.
		for _, n := range c.nodes {
			if pid := n.frozenPID.Load(); pid > 0 {
				_ = syscall.Kill(int(pid), syscall.SIGCONT)
			}
		}
		for _, n := range c.nodes {
			if n.down.Load() {
				if _, err := c.pid(n); err != nil {
					_ = c.startNode(context.Background(), n)
				}
			}
		}
	})
	return c
}

func (c *cluster) proxied() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.proxy)
	}
	return out
}

func (c *cluster) node(id int32) *brokerNode {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (c *cluster) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.mu.Lock()
	c.noteLog = append(c.noteLog, msg)
	c.mu.Unlock()
	h := c.h
	c.t.Logf("chaos: %s (at %v, committed %d/%d)", msg, time.Since(h.begun).Round(time.Millisecond), h.committed.Load(), h.cfg.records)
}

func (c *cluster) notes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.noteLog...)
}

func (c *cluster) summary() string {
	return fmt.Sprintf("cluster_brokers=%d broker_kills=%d broker_freezes=%d fenced=%d elections=%d conn_cuts=%d conn_resets=%d conn_stalls=%d conn_latency=%d",
		len(c.nodes), c.brokerKills.Load(), c.freezes.Load(), c.fencings.Load(), c.elections.Load(), c.cuts.Load(), c.resets.Load(), c.stalls.Load(), c.latencies.Load())
}

// pid returns the running JVM of n (checked against its command line, so a
// reused pid is never signalled).
func (c *cluster) pid(n *brokerNode) (int, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, "kafka.pid"))
	if err != nil {
		return 0, fmt.Errorf("broker %d: %w", n.id, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("broker %d: pid file: %w", n.id, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), filepath.Join(n.dir, "server.properties")) {
		return 0, fmt.Errorf("broker %d: pid %d is not running", n.id, pid)
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return 0, fmt.Errorf("broker %d: pid %d exited", n.id, pid)
		}
	}
	return pid, nil
}

func (c *cluster) startNode(ctx context.Context, n *brokerNode) error {
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(rctx, "bash", c.script, "start-node", c.dir, strconv.Itoa(int(n.id))).CombinedOutput()
	if err != nil {
		return fmt.Errorf("restarting broker %d: %v\n%s", n.id, err, out)
	}
	n.down.Store(false)
	return nil
}

// roles describes what node id leads or coordinates for the run right now.
func (c *cluster) roles(ctx context.Context, id int32) string {
	h := c.h
	var out []string
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if md, err := h.c.Adm.Metadata(rctx, h.in, h.out, h.changelog()); err == nil {
		for _, topic := range []string{h.in, h.out, h.changelog()} {
			var ps []int32
			for _, p := range md.Topics[topic].Partitions.Sorted() {
				if p.Leader == id {
					ps = append(ps, p.Partition)
				}
			}
			if len(ps) > 0 {
				out = append(out, fmt.Sprintf("leader of %s %v", short(h, topic), ps))
			}
		}
	}
	var txns []int32
	for _, r := range h.c.Adm.FindTxnCoordinators(rctx, c.txnIDs()...).Sorted() {
		if r.Err == nil && r.NodeID == id {
			n, _ := strconv.Atoi(r.Name[strings.LastIndexByte(r.Name, '-')+1:])
			txns = append(txns, int32(n))
		}
	}
	slices.Sort(txns)
	if len(txns) > 0 {
		out = append(out, fmt.Sprintf("txn coordinator of tasks %v", txns))
	}
	if g := h.c.Adm.FindGroupCoordinators(rctx, h.app); g.Ok() && g[h.app].NodeID == id {
		out = append(out, "group coordinator")
	}
	if len(out) == 0 {
		return "no role"
	}
	return strings.Join(out, ", ")
}

func short(h *harness, topic string) string {
	switch topic {
	case h.in:
		return "input"
	case h.out:
		return "output"
	case h.changelog():
		return "changelog"
	}
	return topic
}

func (c *cluster) txnIDs() []string {
	var ids []string
	for p := range c.h.cfg.partitions {
		ids = append(ids, fmt.Sprintf("%s-%d", c.h.app, p))
	}
	return ids
}

// brokerFault is one planned broker fault.
type brokerFault struct {
	kind string // "kill", "freeze", "elect"
	role string // kill: "input", "output", "changelog", "coordinator"
}

// plan returns the broker faults in order: kills rotating over the roles,
// freezes between them, and each election after a fault that moved
// leaders away from their preferred replicas.
func (c *cluster) plan() []brokerFault {
	roles := []string{"input", "output", "changelog", "coordinator"}
	off := c.rng.intN(len(roles))
	var disrupt []brokerFault
	for i := range c.cfg.kills {
		disrupt = append(disrupt, brokerFault{kind: "kill", role: roles[(off+i)%len(roles)]})
	}
	for j := range c.cfg.freezes {
		at := (2*j + 1) * len(disrupt) / (2*c.cfg.freezes + 1)
		disrupt = slices.Insert(disrupt, at, brokerFault{kind: "freeze"})
	}
	var evs []brokerFault
	elections := c.cfg.elections
	for i, ev := range disrupt {
		evs = append(evs, ev)
		// Spread the elections over the disruptions, the last ones after
		// the last disruption.
		if elections > 0 && (len(disrupt)-i <= elections || i%2 == 0) {
			evs = append(evs, brokerFault{kind: "elect"})
			elections--
		}
	}
	for ; elections > 0; elections-- {
		evs = append(evs, brokerFault{kind: "elect"})
	}
	return evs
}

// brokerChaos runs the broker faults, spread over the run like the
// processor faults: fault i waits until i/(faults+1) of the inputs
// released during the chaos are committed.
func (c *cluster) brokerChaos(ctx context.Context) {
	h := c.h
	evs := c.plan()
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, strings.TrimSpace(ev.kind+" "+ev.role))
	}
	c.t.Logf("chaos: broker faults planned: %s", strings.Join(kinds, ", "))
	span := int64(h.cfg.records - h.reserve())
	for i, ev := range evs {
		threshold := int64(i+1) * span / int64(len(evs)+1)
		for h.committed.Load() < threshold && ctx.Err() == nil {
			sleep(ctx, 20*time.Millisecond)
		}
		if ctx.Err() != nil {
			c.t.Errorf("chaos: timed out before broker fault %d of %d (%s)", i+1, len(evs), kinds[i])
			return
		}
		if err := c.waitHealthy(ctx, 3*time.Minute); err != nil {
			c.t.Errorf("chaos: broker fault %d (%s) skipped: %v", i+1, kinds[i], err)
			continue
		}
		sleep(ctx, c.rng.between(0, time.Second))
		switch ev.kind {
		case "kill":
			c.killBroker(ctx, ev.role)
		case "freeze":
			c.freeze(ctx)
		case "elect":
			c.electDuringRestore(ctx)
		}
	}
	if err := c.waitHealthy(ctx, 3*time.Minute); err != nil {
		c.t.Errorf("chaos: after the broker faults: %v", err)
	}
}

// waitHealthy waits until every broker runs and every partition of the
// run's topics and of the internal topics has all its replicas in sync.
func (c *cluster) waitHealthy(ctx context.Context, limit time.Duration) error {
	h := c.h
	topics := []string{h.in, h.out, h.changelog(), "__consumer_offsets", "__transaction_state"}
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		last = ""
		for _, n := range c.nodes {
			if _, err := c.pid(n); err != nil || n.down.Load() {
				last = fmt.Sprintf("broker %d is down", n.id)
			}
		}
		if last == "" {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			md, err := h.c.Adm.Metadata(rctx, topics...)
			cancel()
			if err != nil {
				last = err.Error()
			} else {
				for _, topic := range topics {
					td, ok := md.Topics[topic]
					if !ok || td.Err != nil {
						last = fmt.Sprintf("topic %s: not described (%v)", topic, td.Err)
						continue
					}
					for _, p := range td.Partitions.Sorted() {
						if p.Leader < 0 || len(p.ISR) < len(c.nodes) {
							last = fmt.Sprintf("%s/%d: leader %d, isr %v", topic, p.Partition, p.Leader, p.ISR)
						}
					}
				}
			}
		}
		if last == "" {
			return nil
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("cluster not healthy within %v: %s", limit, last)
}

// target returns the broker to hit for role and what it is for.
func (c *cluster) target(ctx context.Context, role string) (int32, string, error) {
	h := c.h
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch role {
	case "input", "output", "changelog":
		topic := map[string]string{"input": h.in, "output": h.out, "changelog": h.changelog()}[role]
		md, err := h.c.Adm.Metadata(rctx, topic)
		if err != nil {
			return -1, "", err
		}
		p := int32(c.rng.intN(int(h.cfg.partitions)))
		d, ok := md.Topics[topic].Partitions[p]
		if !ok || d.Leader < 0 {
			return -1, "", fmt.Errorf("%s/%d has no leader", topic, p)
		}
		return d.Leader, fmt.Sprintf("leader of %s partition %d", role, p), nil
	case "coordinator":
		task := c.rng.intN(int(h.cfg.partitions))
		id := fmt.Sprintf("%s-%d", h.app, task)
		state := ""
		if dts, err := h.c.Adm.DescribeTransactions(rctx, id); err == nil {
			if dt, ok := dts[id]; ok && dt.Err == nil {
				state = fmt.Sprintf(", transaction %s epoch %d", dt.State, dt.ProducerEpoch)
			}
		}
		r, ok := h.c.Adm.FindTxnCoordinators(rctx, id)[id]
		if !ok || r.Err != nil {
			return -1, "", fmt.Errorf("transaction coordinator of %s: %v", id, r.Err)
		}
		return r.NodeID, fmt.Sprintf("transaction coordinator of task %d (%s%s)", task, id, state), nil
	}
	return -1, "", fmt.Errorf("unknown role %q", role)
}

// killBroker SIGKILLs the broker that plays role, waits a moment and
// restarts it on its ports and log dir.
func (c *cluster) killBroker(ctx context.Context, role string) {
	c.broker.Lock()
	defer c.broker.Unlock()
	id, what, err := c.target(ctx, role)
	if err != nil {
		// Fall back to any broker: the kill still lands.
		id = c.nodes[c.rng.intN(len(c.nodes))].id
		what = fmt.Sprintf("random broker (no %s found: %v)", role, err)
	}
	n := c.node(id)
	if n == nil {
		c.t.Errorf("chaos: broker kill: unknown node %d", id)
		return
	}
	roles := c.roles(ctx, id)
	pid, err := c.pid(n)
	if err != nil {
		c.t.Errorf("chaos: broker kill: %v", err)
		return
	}
	n.down.Store(true)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		n.down.Store(false)
		c.t.Errorf("chaos: SIGKILL broker %d (pid %d): %v", id, pid, err)
		return
	}
	n.proxyCtl.halt()
	for i := 0; i < 300; i++ {
		if _, err := c.pid(n); err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	killed := time.Now()
	c.brokerKills.Add(1)
	downFor := c.rng.between(time.Second, 6*time.Second)
	sleep(ctx, downFor)
	if err := c.startNode(ctx, n); err != nil {
		c.t.Errorf("chaos: %v", err)
		return
	}
	if err := n.proxyCtl.resume(); err != nil {
		c.t.Errorf("chaos: %v", err)
	}
	c.note("broker kill %d: SIGKILL broker %d, %s (%s); restarted after %v, up again after %v",
		c.brokerKills.Load(), id, what, roles, downFor.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
}

// freeze SIGSTOPs a broker (the group coordinator or a changelog leader)
// past broker.session.timeout.ms (6s) so the controller fences it and moves
// its leaderships, then SIGCONTs it.
func (c *cluster) freeze(ctx context.Context) {
	c.broker.Lock()
	defer c.broker.Unlock()
	h := c.h
	var id int32 = -1
	what := ""
	if c.rng.intN(2) == 0 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if g := h.c.Adm.FindGroupCoordinators(rctx, h.app); g.Ok() {
			id, what = g[h.app].NodeID, "group coordinator"
		}
		cancel()
	}
	if id < 0 {
		var err error
		if id, what, err = c.target(ctx, "changelog"); err != nil {
			id, what = c.nodes[c.rng.intN(len(c.nodes))].id, "random broker"
		}
	}
	n := c.node(id)
	if n == nil {
		c.t.Errorf("chaos: freeze: unknown node %d", id)
		return
	}
	roles := c.roles(ctx, id)
	pid, err := c.pid(n)
	if err != nil {
		c.t.Errorf("chaos: freeze: %v", err)
		return
	}
	n.down.Store(true)
	n.frozenPID.Store(int64(pid))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		n.frozenPID.Store(0)
		n.down.Store(false)
		c.t.Errorf("chaos: SIGSTOP broker %d: %v", id, err)
		return
	}
	stopped := time.Now()
	hold := c.rng.between(9*time.Second, 13*time.Second)
	fenced := false
	// Frozen for hold, and on until the controller fenced it (25s at most).
	for (time.Since(stopped) < hold || !fenced) && time.Since(stopped) < 25*time.Second && ctx.Err() == nil {
		if !fenced && time.Since(stopped) > 6*time.Second {
			// The controller fenced it: it leads nothing and is in no ISR.
			fenced = c.fenced(ctx, id)
		}
		sleep(ctx, 250*time.Millisecond)
	}
	err = syscall.Kill(pid, syscall.SIGCONT)
	n.frozenPID.Store(0)
	n.down.Store(false)
	if err != nil {
		c.t.Errorf("chaos: SIGCONT broker %d: %v", id, err)
		return
	}
	c.freezes.Add(1)
	if fenced {
		c.fencings.Add(1)
	}
	c.note("broker freeze %d: SIGSTOP broker %d, %s (%s) for %v; fenced (no leadership, in no ISR) while frozen: %v",
		c.freezes.Load(), id, what, roles, time.Since(stopped).Round(time.Millisecond), fenced)
}

// fenced reports whether broker id leads no partition of the run's and the
// internal topics and is in none of their ISRs.
func (c *cluster) fenced(ctx context.Context, id int32) bool {
	h := c.h
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	md, err := h.c.Adm.Metadata(rctx, h.in, h.out, h.changelog(), "__consumer_offsets", "__transaction_state")
	if err != nil {
		return false
	}
	for _, td := range md.Topics {
		if td.Err != nil {
			return false
		}
		for _, p := range td.Partitions {
			if p.Leader == id || slices.Contains(p.ISR, id) {
				return false
			}
		}
	}
	return true
}

// electDuringRestore waits for a processor to start restoring tasks (a
// "partitions assigned" line in a current process's log: its restores run
// right after it) and forces a preferred leader election of every
// partition at that moment.
func (c *cluster) electDuringRestore(ctx context.Context) {
	h := c.h
	seen := map[string]int{}
	for _, p := range h.live() {
		seen[p.log] = countIn(p.log, "partitions assigned")
	}
	trigger := "no restore began within 60s"
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		for _, p := range h.live() {
			if countIn(p.log, "partitions assigned") > seen[p.log] {
				trigger = fmt.Sprintf("slot %d gen %d began restoring its tasks", p.slot, p.gen)
				break
			}
		}
		if !strings.HasPrefix(trigger, "no ") {
			break
		}
		sleep(ctx, 5*time.Millisecond)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	off := 0
	if md, err := h.c.Adm.Metadata(rctx, h.in, h.out, h.changelog(), "__consumer_offsets", "__transaction_state"); err == nil {
		for _, td := range md.Topics {
			for _, p := range td.Partitions {
				if len(p.Replicas) > 0 && p.Leader != p.Replicas[0] {
					off++
				}
			}
		}
	}
	res, err := h.c.Adm.ElectLeaders(rctx, kadm.ElectPreferredReplica, nil)
	if err != nil {
		c.t.Errorf("chaos: preferred leader election: %v", err)
		return
	}
	moved := 0
	for _, ps := range res {
		for _, r := range ps {
			if r.Err == nil {
				moved++
			}
		}
	}
	c.elections.Add(1)
	c.note("election %d: preferred leader election as %s: %d partitions off their preferred leader, %d moved",
		c.elections.Load(), trigger, off, moved)
}

// countIn counts the lines of file that contain s.
func countIn(file, s string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), s)
}

// connChaos injects connection faults on the processors' proxies until
// done: cuts (every connection of a broker's proxy closed, new ones
// refused for a moment), stalls (no byte moves either way for a while)
// and latency. Each kind comes at least once.
func (c *cluster) connChaos(ctx context.Context, done <-chan struct{}) {
	kinds := []string{"cut", "stall", "reset", "latency"}
	i := c.rng.intN(len(kinds))
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-time.After(c.rng.between(c.cfg.connEvery/2, c.cfg.connEvery*3/2)):
		}
		n := c.nodes[c.rng.intN(len(c.nodes))]
		kind := kinds[i%len(kinds)]
		i++
		var err error
		switch kind {
		case "cut":
			gap := c.rng.between(0, 1500*time.Millisecond)
			if err = n.proxyCtl.cut(gap); err == nil {
				c.cuts.Add(1)
				c.note("conn cut %d: closed every connection through broker %d's proxy, refused new ones for %v",
					c.cuts.Load(), n.id, gap.Round(time.Millisecond))
			}
		case "reset":
			d := c.rng.between(200*time.Millisecond, 2*time.Second)
			if err = n.proxyCtl.reset(ctx, d); err == nil {
				c.resets.Add(1)
				c.note("conn reset %d: broker %d's proxy reset (RST) every connection that sent a request for %v",
					c.resets.Load(), n.id, d.Round(time.Millisecond))
			}
		case "stall":
			d := c.rng.between(500*time.Millisecond, 4*time.Second)
			if err = n.proxyCtl.stall(ctx, d); err == nil {
				c.stalls.Add(1)
				c.note("conn stall %d: broker %d's proxy moved no bytes for %v", c.stalls.Load(), n.id, d.Round(time.Millisecond))
			}
		case "latency":
			d := c.rng.between(3*time.Second, 8*time.Second)
			ms := 50 + c.rng.intN(250)
			if err = n.proxyCtl.latency(ctx, d, ms, ms/2); err == nil {
				c.latencies.Add(1)
				c.note("conn latency %d: broker %d's proxy delayed every read by %dms±%dms for %v",
					c.latencies.Load(), n.id, ms, ms/2, d.Round(time.Millisecond))
			}
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			c.t.Errorf("chaos: connection fault %s on broker %d: %v", kind, n.id, err)
		}
	}
}
