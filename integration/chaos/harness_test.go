package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// config describes one chaos run.
type config struct {
	processor  string // "sequencer" or "naive"
	records    int
	keys       int
	partitions int32
	processes  int
	kills      int
	zombies    int
	stops      int
	standby    int // standby replicas of every processor (StandbyReplicas)
	session    time.Duration
	duration   time.Duration // over which the feeder paces the inputs
	timeout    time.Duration
	seed       uint64
	// modes, when set, replaces the kill mode rotation.
	modes []killMode
	// extra arguments for every processor.
	extra []string
}

// loadConfig returns the run's configuration: defaults sized for a 2-core
// machine and the embedded broker, overridden by CHAOS_* variables.
func loadConfig(t testing.TB, processor string) config {
	t.Helper()
	cfg := config{
		processor:  processor,
		records:    envInt(t, "CHAOS_RECORDS", 20000),
		keys:       envInt(t, "CHAOS_KEYS", 60),
		partitions: int32(envInt(t, "CHAOS_PARTITIONS", 6)),
		processes:  envInt(t, "CHAOS_PROCESSES", 3),
		kills:      envInt(t, "CHAOS_KILLS", 6),
		zombies:    envInt(t, "CHAOS_ZOMBIES", 1),
		stops:      envInt(t, "CHAOS_STOPS", 1),
		standby:    envInt(t, "CHAOS_STANDBY", 0),
		session:    envDuration(t, "CHAOS_SESSION_TIMEOUT", 3*time.Second),
		seed:       uint64(envInt(t, "CHAOS_SEED", int(time.Now().UnixNano()%1e9))),
	}
	cfg.extra = strings.Fields(os.Getenv("CHAOS_PROCESSOR_ARGS"))
	if cfg.standby > 0 && processor == "sequencer" {
		cfg.extra = append(cfg.extra, "-standby-replicas", strconv.Itoa(cfg.standby))
	}
	faults := time.Duration(cfg.kills + cfg.zombies + cfg.stops)
	cfg.duration = envDuration(t, "CHAOS_DURATION", max(10*time.Second, faults*(cfg.session+2*time.Second)))
	// Generous: a healthy run needs a fraction of this.
	def := 3*time.Minute + cfg.duration + time.Duration(cfg.records/1000)*time.Second +
		faults*(4*cfg.session+10*time.Second)
	cfg.timeout = envDuration(t, "CHAOS_TIMEOUT", def)
	require.GreaterOrEqual(t, cfg.partitions, int32(1))
	require.GreaterOrEqual(t, cfg.keys, int(cfg.partitions), "CHAOS_KEYS: every partition needs a key")
	require.GreaterOrEqual(t, cfg.processes, 1)
	require.GreaterOrEqual(t, cfg.records, cfg.keys)
	return cfg
}

func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s", name)
	return n
}

func envDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "%s", name)
	return d
}

// The processor binaries are built once per test binary, into binDir.
var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flechtwerk-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binary returns the path of the processor command name ("sequencer",
// "naive"), building both on first use. CHAOS_RACE=1 builds them with -race.
func binary(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		args := []string{"build", "-o", binDir + string(filepath.Separator)}
		if os.Getenv("CHAOS_RACE") != "" {
			args = append(args, "-race")
		}
		args = append(args, "./sequencer", "./naive")
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, name)
}

// rng is a goroutine-safe random source seeded for the run.
type rng struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRNG(seed uint64) *rng { return &rng{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

func (r *rng) intN(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.IntN(n)
}

// between returns a duration uniformly in [lo, hi).
func (r *rng) between(lo, hi time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return lo + time.Duration(r.r.Int64N(int64(hi-lo)))
}

// harness is one chaos run.
type harness struct {
	t       testing.TB
	cfg     config
	c       *kafkatest.Cluster
	rng     *rng
	in, out string
	app     string
	dir     string
	fleet   *fleet
	begun   time.Time

	// what the feeder produced so far, and the group's committed progress
	produced  atomic.Int64
	committed atomic.Int64
	chaosDone chan struct{}

	// procBrokers, when set, is the processors' bootstrap (e.g. through
	// fault-injecting proxies); the harness's own clients use h.c.Brokers.
	procBrokers []string
	// sideChaos run alongside the processor faults (e.g. broker faults);
	// the chaos is over once they and chaos() returned. bgChaos run until
	// then (done closes) (e.g. connection faults).
	sideChaos []func(ctx context.Context)
	bgChaos   []func(ctx context.Context, done <-chan struct{})
	// summaryExtra adds fields to the summary line.
	summaryExtra func() string

	zombieNotes  []string
	killNotes    []string
	stops        int
	stopFailures []string // graceful stops that did not end cleanly

	mu          sync.Mutex
	regressions []string // committed offsets seen moving backwards
}

func newHarness(t testing.TB, cfg config) *harness {
	t.Helper()
	h := &harness{
		t: t, cfg: cfg, c: kafkatest.New(t), rng: newRNG(cfg.seed),
		in: kafkatest.Name("chaos-in"), out: kafkatest.Name("chaos-out"), app: kafkatest.Name("chaos-app"),
		dir: t.TempDir(), chaosDone: make(chan struct{}),
	}
	if keep := os.Getenv("CHAOS_KEEP"); keep != "" {
		// Keep the processor logs for a post-mortem.
		dir, err := os.MkdirTemp(keep, "chaos-")
		require.NoError(t, err)
		h.dir = dir
		t.Logf("chaos: logs and state in %s", dir)
	}
	t.Logf("chaos: seed=%d processor=%s records=%d keys=%d partitions=%d processes=%d kills=%d zombies=%d stops=%d session=%v duration=%v timeout=%v",
		cfg.seed, cfg.processor, cfg.records, cfg.keys, cfg.partitions, cfg.processes, cfg.kills, cfg.zombies, cfg.stops, cfg.session, cfg.duration, cfg.timeout)
	return h
}

func (h *harness) changelog() string { return h.app + "-changelog" }

// key returns the key of input n: k(n % keys).
func (h *harness) key(n int) string { return "k" + strconv.Itoa(n%h.cfg.keys) }

// partitionOf returns the input partition of key index k.
func (h *harness) partitionOf(k int) int32 { return int32(k) % h.cfg.partitions }

// record returns input n.
func (h *harness) record(n int) *kgo.Record {
	return &kgo.Record{
		Topic: h.in, Partition: h.partitionOf(n % h.cfg.keys),
		Key: []byte(h.key(n)), Value: []byte(strconv.Itoa(n)),
	}
}

// ends returns the input end offsets after the first total inputs.
func (h *harness) ends(total int) map[int32]int64 {
	out := make(map[int32]int64, h.cfg.partitions)
	for p := range h.cfg.partitions {
		out[p] = 0
	}
	for k := range h.cfg.keys {
		// inputs of key k: n = k, k+keys, ... below total
		if k < total {
			out[h.partitionOf(k)] += int64((total-k-1)/h.cfg.keys + 1)
		}
	}
	return out
}

// count returns how many of the first total inputs have key index k.
func (h *harness) count(k, total int) int {
	if k >= total {
		return 0
	}
	return (total-k-1)/h.cfg.keys + 1
}

// processorArgs are the arguments of slot's generation gen.
func (h *harness) processorArgs(slot, gen int) []string {
	polls := []int{50, 200, 500}
	brokers := h.c.Brokers
	if len(h.procBrokers) > 0 {
		brokers = h.procBrokers
	}
	return append([]string{
		"-brokers", strings.Join(brokers, ","),
		"-app", h.app, "-in", h.in, "-out", h.out,
		"-state-dir", filepath.Join(h.dir, fmt.Sprintf("state-%d", slot)),
		"-session-timeout", h.cfg.session.String(),
		"-max-poll", strconv.Itoa(polls[h.rng.intN(len(polls))]),
	}, h.cfg.extra...)
}

// result is what a run found.
type result struct {
	duplicates, gaps int
	seqExact         bool
	stateChecked     bool
	stateExact       bool
	offsetsExact     bool
	timedOut         bool
	problems         []string
}

// run executes the whole scenario and verifies the output.
func (h *harness) run() result {
	t := h.t
	cfg := h.cfg
	bin := binary(t, cfg.processor)
	h.c.CreateTopic(t, h.in, cfg.partitions)
	h.c.CreateTopic(t, h.out, cfg.partitions)

	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	h.begun = time.Now()

	h.fleet = newFleet(t, bin, h.dir, h.processorArgs)
	for i := range cfg.processes {
		h.fleet.start(i)
	}

	var wg sync.WaitGroup
	wg.Add(2)
	monCtx, stopMon := context.WithCancel(ctx)
	go func() { defer wg.Done(); h.monitor(monCtx) }()
	feedErr := make(chan error, 1)
	go func() { defer wg.Done(); feedErr <- h.feed(ctx) }()

	h.runChaos(ctx)
	close(h.chaosDone)

	// The rest of the input, then lag 0.
	err := <-feedErr
	if err != nil {
		stopMon()
		wg.Wait()
		t.Fatalf("chaos: producing input: %v\n%s", err, h.fleet.tails(15))
	}
	want := h.ends(cfg.records)
	drained := h.waitDrained(ctx, want)
	stopMon()
	wg.Wait()
	if bad := h.fleet.stop(30 * time.Second); len(bad) > 0 {
		t.Logf("chaos: processes that did not stop cleanly on SIGTERM:\n%s", strings.Join(bad, "\n"))
	}

	// Verify even after a timeout: the summary says what was lost.
	res := h.verify(want)
	if !drained {
		res.timedOut = true
		res.problems = append(res.problems, fmt.Sprintf("input not drained within %v", cfg.timeout))
	}
	h.mu.Lock()
	res.problems = append(res.problems, h.regressions...)
	h.mu.Unlock()
	res.problems = append(res.problems, raceReports(h.dir)...)
	return res
}

// runChaos runs the processor faults, the side chaos alongside them and the
// background chaos until both ended.
func (h *harness) runChaos(ctx context.Context) {
	var side, bg sync.WaitGroup
	over := make(chan struct{})
	for _, f := range h.bgChaos {
		bg.Add(1)
		go func() { defer bg.Done(); f(ctx, over) }()
	}
	for _, f := range h.sideChaos {
		side.Add(1)
		go func() { defer side.Done(); f(ctx) }()
	}
	h.chaos(ctx)
	side.Wait()
	close(over)
	bg.Wait()
}

// raceReports names the processor logs in which the race detector (see
// CHAOS_RACE) reported a data race.
func raceReports(dir string) []string {
	var out []string
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil && strings.Contains(string(b), "WARNING: DATA RACE") {
			out = append(out, "data race reported in "+l)
		}
	}
	return out
}

// monitor keeps h.committed at the sum of the group's committed input
// offsets: the number of inputs whose effect is committed.
//
// It also checks that no committed offset ever moves backwards (a zombie's
// stale commit would): under exactly-once they only grow.
func (h *harness) monitor(ctx context.Context) {
	high := map[int32]int64{}
	for ctx.Err() == nil {
		if offs, ok := h.groupOffsets(ctx); ok {
			var sum int64
			for p, o := range offs {
				sum += o
				if o < high[p] && fellBack(ctx, h.c, h.app, h.in, p, high[p]) {
					h.mu.Lock()
					h.regressions = append(h.regressions, fmt.Sprintf("committed offset of partition %d fell back from %d to %d at %v",
						p, high[p], o, time.Since(h.begun).Round(time.Millisecond)))
					h.mu.Unlock()
				}
				high[p] = max(high[p], o)
			}
			h.committed.Store(sum)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// fellBack confirms that the committed offset of partition p of topic in
// group fell below high, as a new owner reads it: stable
// (require_stable), tried up to 50 times 20 ms apart while the partition
// has a transaction's offsets pending (UNSTABLE_OFFSET_COMMIT) or the
// fetch fails. A plain fetch
// can show a regression that no owner acts on: a group coordinator that
// moved before the markers of a committed transaction reached it reports
// the offsets before that transaction until the markers are written
// again, and with require_stable it reports them pending instead. With
// one broker the coordinator cannot move: the plain fetch stands.
func fellBack(ctx context.Context, c *kafkatest.Cluster, group, topic string, p int32, high int64) bool {
	if len(c.Brokers) < 2 {
		return true
	}
	for range 50 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.Adm.FetchOffsets(kadm.RequireStable(rctx), group)
		cancel()
		if err == nil {
			if o, ok := resp.Lookup(topic, p); ok && o.Err == nil {
				return o.At >= 0 && o.At < high
			}
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return false
}

// groupOffsets returns the group's committed offsets of the input topic.
func (h *harness) groupOffsets(ctx context.Context) (map[int32]int64, bool) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := h.c.Adm.FetchOffsets(rctx, h.app)
	if err != nil {
		return nil, false
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == h.in && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out, true
}

// reserve is how many inputs the feeder holds back until the chaos is over,
// so that processing goes on after the last fault.
func (h *harness) reserve() int { return max(500, h.cfg.records/20) }

// feed produces inputs 0..records-1 in order. While the chaos runs it paces
// the inputs over the planned duration (so the faults spread over a busy
// group instead of hitting an idle one after a burst) and holds the last
// reserve() inputs back; once the chaos is over it produces the rest at once.
func (h *harness) feed(ctx context.Context) error {
	cfg := h.cfg
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(50000))
	if err != nil {
		return err
	}
	defer cl.Close()
	hold := cfg.records - h.reserve()
	began := time.Now()
	p := 0
	for p < cfg.records {
		if ctx.Err() != nil {
			return fmt.Errorf("after %d of %d inputs: %w", p, cfg.records, ctx.Err())
		}
		end := min(p+5000, cfg.records)
		if _, released := isClosed(h.chaosDone); !released {
			due := int(float64(hold) * min(1, float64(time.Since(began))/float64(cfg.duration)))
			end = min(p+500, due)
			if end <= p {
				sleep(ctx, 20*time.Millisecond)
				continue
			}
		}
		recs := make([]*kgo.Record, 0, end-p)
		for n := p; n < end; n++ {
			recs = append(recs, h.record(n))
		}
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		if err != nil {
			return fmt.Errorf("inputs %d..%d: %w", p, end-1, err)
		}
		p = end
		h.produced.Store(int64(p))
	}
	return nil
}

func isClosed(ch chan struct{}) (struct{}, bool) {
	select {
	case <-ch:
		return struct{}{}, true
	default:
		return struct{}{}, false
	}
}

// waitDrained waits until the committed offsets equal want (lag 0) and
// reports whether they did before ctx ended.
func (h *harness) waitDrained(ctx context.Context, want map[int32]int64) bool {
	t := h.t
	var got map[int32]int64
	for ctx.Err() == nil {
		if offs, ok := h.groupOffsets(ctx); ok {
			got = offs
			if equalOffsets(got, want) {
				t.Logf("chaos: input drained after %v", time.Since(h.begun).Round(time.Millisecond))
				return true
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
	t.Errorf("chaos: input not drained within %v: committed %v, want %v; unexpected exits %d\n%s",
		h.cfg.timeout, got, want, len(h.fleet.unexpectedExits()), h.fleet.tails(20))
	return false
}

func equalOffsets(got, want map[int32]int64) bool {
	for p, w := range want {
		if w > 0 && got[p] != w {
			return false
		}
	}
	return true
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// owners returns which current process owns which input partitions, from
// the group's assignment. Members of dead generations are left out.
func (h *harness) owners(ctx context.Context) (map[*proc][]int32, string, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gs, err := h.c.Adm.DescribeGroups(rctx, h.app)
	if err != nil {
		return nil, "", err
	}
	g, ok := gs[h.app]
	if !ok {
		return nil, "", errors.New("group not described")
	}
	if g.Err != nil {
		return nil, "", g.Err
	}
	out := map[*proc][]int32{}
	for _, m := range g.Members {
		p := h.fleet.byClientID(m.ClientID)
		if p == nil {
			continue
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				if tp.Topic == h.in {
					out[p] = append(out[p], tp.Partitions...)
				}
			}
		}
	}
	return out, g.State, nil
}

// groupView returns the group's state, its members' client IDs (sorted)
// and how many input partitions are assigned in total.
func (h *harness) groupView(ctx context.Context) (state string, clients []string, assigned int, err error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gs, err := h.c.Adm.DescribeGroups(rctx, h.app)
	if err != nil {
		return "", nil, 0, err
	}
	g := gs[h.app]
	if g.Err != nil {
		return "", nil, 0, g.Err
	}
	for _, m := range g.Members {
		clients = append(clients, m.ClientID)
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				if tp.Topic == h.in {
					assigned += len(tp.Partitions)
				}
			}
		}
	}
	slices.Sort(clients)
	return g.State, clients, assigned, nil
}

// signalOrLog sends sig and logs a failure.
func (h *harness) signalOrLog(p *proc, sig syscall.Signal) bool {
	if err := h.fleet.signal(p, sig); err != nil {
		h.t.Logf("chaos: %v to slot %d gen %d: %v", sig, p.slot, p.gen, err)
		return false
	}
	return true
}
