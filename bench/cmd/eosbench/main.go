// Command eosbench measures the exactly-once runner against a plain franz-go
// loop and a hand-rolled GroupTransactSession loop on one broker, in one
// run. See the bench package documentation; `make bench` runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/flechtwerk/flechtwerk/runner"
)

type config struct {
	brokers        string
	brokerPID      int
	label          string
	records        int
	keys           int
	partitions     int
	latencyDur     time.Duration
	latencyWarm    time.Duration
	latencyRate    float64
	brokerWarm     time.Duration
	streams        string
	streamsThreads int
	latencyAll     bool
	shared         bool
	restoreRecords int
	cpuProfile     string
	latencyProfile string
	verify         bool
	reference      bool
	drainTimeout   time.Duration
	syncLoop       bool
	sessionLoop    bool
	intervals      string
}

func main() {
	var c config
	flag.StringVar(&c.brokers, "brokers", "", "seed brokers (comma separated); empty: an embedded kfake broker in this process")
	flag.IntVar(&c.brokerPID, "broker-pid", 0, "pid of the broker process, to report its CPU use (0: not reported)")
	flag.StringVar(&c.label, "label", "", "broker label for the report (default: kafka or kfake)")
	flag.IntVar(&c.records, "records", 1_000_000, "input records of each drain row")
	flag.IntVar(&c.keys, "keys", 1000, "distinct keys (state keys) of the input")
	flag.IntVar(&c.partitions, "partitions", 12, "partitions of the input and output topics")
	flag.DurationVar(&c.latencyDur, "latency-duration", 15*time.Second, "how long the paced producer runs per latency row (0: no latency rows)")
	flag.DurationVar(&c.latencyWarm, "latency-warmup", 3*time.Second, "inputs of the first this long of a latency row are not counted (the step from idle to the offered load)")
	flag.Float64Var(&c.latencyRate, "latency-rate", 0, "offered load of the latency rows in records/s (0: half the drain rate of (c))")
	flag.DurationVar(&c.brokerWarm, "broker-warmup", 15*time.Second, "before the latency rows, run the runner at the default settings this long at the same offered load, to warm the broker up to that load; its figures are printed as the first latency row, labelled, and are not a result (0: none)")
	flag.StringVar(&c.streams, "streams", "bench/streams", "directory of the Kafka Streams counter (rows (d), on Apache Kafka only; built with mvn, run with java); empty: no Kafka Streams rows")
	flag.IntVar(&c.streamsThreads, "streams-threads", runtime.NumCPU(), "num.stream.threads of the Kafka Streams rows")
	flag.BoolVar(&c.latencyAll, "latency-all", true, "also measure the latency of (a) and (b) at the same load")
	flag.BoolVar(&c.shared, "shared", true, "also run the rows (s): the runner in the shared-producer mode (runner.SharedProducer), at the default interval and at each of -intervals")
	flag.IntVar(&c.restoreRecords, "restore-records", 1_000_000, "records of 100 bytes in the restore benchmark (0: skip)")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of this process during the drain of (c) at the default settings to this file")
	flag.StringVar(&c.latencyProfile, "latency-cpuprofile", "", "write a CPU profile of this process while the paced producer of the latency row of (c) at the default settings runs")
	flag.BoolVar(&c.verify, "verify", true, "after each drain, count the committed outputs (2 per input)")
	flag.BoolVar(&c.reference, "reference", true, "also run the reference rows (runner with MaxPollRecords 20000; latency with outputs on their input's partition)")
	flag.DurationVar(&c.drainTimeout, "drain-timeout", 30*time.Minute, "give up on a drain row after this long")
	flag.BoolVar(&c.syncLoop, "sync-loop", true, "also run the extra row (a-sync): the plain loop that waits for its outputs and its commit after every poll")
	flag.BoolVar(&c.sessionLoop, "session-loop", true, "run the rows (b) of the GroupTransactSession loop")
	flag.StringVar(&c.intervals, "intervals", "10ms,1s", "commit intervals of the extra runner rows (comma separated; empty: none)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "eosbench:", err)
		os.Exit(1)
	}
}

// warmupLabel is the label of the latency row that warms the broker up.
const warmupLabel = "(warm-up of the broker, not a result) runner, default"

func run(ctx context.Context, c config) error {
	kind := "kafka"
	var brokers []string
	if c.brokers == "" {
		kind = "kfake"
		fc, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer fc.Close()
		brokers = fc.ListenAddrs()
	} else {
		brokers = strings.Split(c.brokers, ",")
	}
	if c.label == "" {
		c.label = kind
	}
	e, err := newEnv(kind, brokers, c.brokerPID)
	if err != nil {
		return err
	}
	defer e.close()
	if *warmKeys > 0 {
		return runWarm(ctx, e, *warmKeys)
	}
	parts := int32(c.partitions)
	logf("broker %s at %v: %d partitions, 1 instance, %d records over %d keys, 2 outputs per input, %d records per poll",
		c.label, brokers, parts, c.records, c.keys, maxPoll)

	in := e.name("in")
	if err := e.createTopic(ctx, in, parts, false); err != nil {
		return err
	}
	t0 := time.Now()
	ends, err := e.produceInputs(ctx, in, c.records, c.keys, parts)
	if err != nil {
		return err
	}
	logf("pre-produced %d records to %s in %v", c.records, in, time.Since(t0).Round(time.Millisecond))

	stats := &reqStats{}
	rows := []*drainResult{}
	drainRow := func(p processor, profile string, withStats bool) (*drainResult, error) {
		var st *reqStats
		if withStats {
			st = stats
		}
		r, err := drain(ctx, e, c, p, in, ends, st, profile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.label, err)
		}
		logf("%-58s %10.0f records/s  (%v)", p.label, r.rate, r.wall.Round(time.Millisecond))
		rows = append(rows, r)
		return r, nil
	}

	a, err := drainRow(plainPipe(), "", false)
	if err != nil {
		return err
	}
	var aSync *drainResult
	if c.syncLoop {
		if aSync, err = drainRow(syncLoop(), "", false); err != nil {
			return err
		}
	}
	var b *drainResult
	if c.sessionLoop {
		if b, err = drainRow(sessionLoop(stats), "", true); err != nil {
			return err
		}
	}
	cDefault, err := drainRow(runnerProc("(c) runner, default settings", stats), c.cpuProfile, true)
	if err != nil {
		return err
	}
	type variant struct {
		label string
		proc  *processor
		err   error
	}
	var shared []variant // (s): the shared-producer mode
	if c.shared {
		p := runnerProc("(s) runner, SharedProducer", nil, runner.SharedProducer())
		shared = append(shared, variant{label: p.label, proc: &p})
		if _, err := drainRow(p, "", false); err != nil {
			return err
		}
	}
	var intervals []variant
	ivs, err := parseIntervals(c.intervals)
	if err != nil {
		return err
	}
	for _, d := range ivs {
		label := fmt.Sprintf("(c) runner, CommitInterval %v", d)
		opt, err := commitInterval(d)
		if err != nil {
			intervals = append(intervals, variant{label: label, err: err})
			continue
		}
		p := runnerProc(label, nil, opt)
		intervals = append(intervals, variant{label: label, proc: &p})
		if _, err := drainRow(p, "", false); err != nil {
			return err
		}
		if c.shared {
			sp := runnerProc(fmt.Sprintf("(s) runner, SharedProducer, CommitInterval %v", d), nil, runner.SharedProducer(), opt)
			shared = append(shared, variant{label: sp.label, proc: &sp})
		}
	}
	// (d) Kafka Streams, the same counter under exactly_once_v2.
	var (
		d          *drainResult
		dLatency   []processor
		streamsErr error
	)
	if c.streams != "" && kind == "kafka" {
		var cp string
		if cp, streamsErr = buildStreams(ctx, c.streams); streamsErr == nil {
			label := func(iv time.Duration) string {
				return fmt.Sprintf("(d) Kafka Streams exactly_once_v2, commit %v", iv)
			}
			p := streamsProc(label(100*time.Millisecond), cp, 100*time.Millisecond, c.streamsThreads)
			if d, err = drainRow(p, "", false); err != nil {
				return err
			}
			dLatency = []processor{p, streamsProc(label(10*time.Millisecond), cp, 10*time.Millisecond, c.streamsThreads)}
		}
	}
	var refs []*drainResult
	if c.reference {
		for _, p := range []processor{
			runnerProc("(ref) runner, MaxPollRecords 20000", stats, runner.MaxPollRecords(20000)),
		} {
			r, err := drainRow(p, "", true)
			if err != nil {
				return err
			}
			refs = append(refs, r)
		}
	}

	// Latency at a steady offered load.
	var lats []latRow
	var warmRow []latRow // printed first, not lats[0] (the row of (c))
	rate := c.latencyRate
	if rate <= 0 {
		rate = cDefault.rate / 2
	}
	if c.latencyDur > 0 && c.brokerWarm > 0 {
		// A broker that only drained so far is not warm at a paced load:
		// on a fresh broker the first latency row at 88k records/s took
		// the broker 1.13 cores and had a p99 of 264ms, the same row in
		// the next run on that broker 0.93 cores and 150ms.
		wc := c
		wc.latencyDur = c.brokerWarm
		p := runnerProc(warmupLabel, nil)
		p.traced = false // not a result: no breakdown
		res, err := latencyRun(ctx, e, wc, p, rate, false, nil)
		if err != nil {
			return fmt.Errorf("latency of %s: %w", p.label, err)
		}
		logf("latency %-50s p50 %v p99 %v", p.label, round(res.p50), round(res.p99))
		warmRow = []latRow{{label: p.label, res: res}}
	}
	if c.latencyDur > 0 {
		procs := []processor{runnerProc("(c) runner, default settings", stats)}
		if c.reference {
			cp := runnerProc("(ref) runner, outputs on their input's partition", nil)
			cp.copartitioned = true
			procs = append(procs, cp)
		}
		for _, v := range intervals {
			if v.proc != nil {
				procs = append(procs, *v.proc)
			}
		}
		for _, v := range shared {
			procs = append(procs, *v.proc)
		}
		if c.latencyAll {
			procs = append(procs, plainPipe())
			if c.syncLoop {
				procs = append(procs, syncLoop())
			}
			if c.sessionLoop {
				procs = append(procs, sessionLoop(nil))
			}
		}
		for i, p := range procs {
			res, err := latencyRun(ctx, e, c, p, rate, i == 0, stats)
			if err != nil {
				return fmt.Errorf("latency of %s: %w", p.label, err)
			}
			logf("latency %-50s p50 %v p99 %v", p.label, round(res.p50), round(res.p99))
			lats = append(lats, latRow{label: p.label, res: res})
		}
		for _, v := range intervals {
			if v.proc == nil {
				lats = append(lats, latRow{label: v.label, err: v.err})
			}
		}
	}

	// Latency against Kafka Streams at a load both keep up with: half the
	// drain rate of (d) when it drains slower than (c) (at the main rate it
	// would only fall behind), the runner's rows again beside it, untraced
	// like it.
	var (
		peerRate float64
		peers    []latRow
	)
	if c.latencyDur > 0 && d != nil {
		peerRate = min(rate, d.rate/2)
		procs := []processor{runnerProc("(c) runner, default settings", nil)}
		if len(intervals) > 0 && intervals[0].proc != nil { // 10ms by default
			v := intervals[0]
			procs = append(procs, *v.proc)
		}
		procs = append(procs, dLatency...)
		// A new JVM compiles as it goes: every row of this section offers
		// the load for -broker-warmup more before its inputs count (in one
		// run without it, the 10ms row of (d) held a 1.07s p99 from
		// windows 3.5s into the row, at 21.8k records/s).
		pc := c
		pc.latencyWarm += c.brokerWarm
		pc.latencyDur += c.brokerWarm
		for _, p := range procs {
			p.traced = false
			res, err := latencyRun(ctx, e, pc, p, peerRate, false, nil)
			if err != nil {
				return fmt.Errorf("latency of %s at %.0f records/s: %w", p.label, peerRate, err)
			}
			logf("latency at %.0f/s %-40s p50 %v p99 %v", peerRate, p.label, round(res.p50), round(res.p99))
			peers = append(peers, latRow{label: p.label, res: res})
		}
	}

	var rst *restoreResult
	if c.restoreRecords > 0 {
		if rst, err = restoreBench(ctx, e, c.restoreRecords); err != nil {
			return err
		}
	}

	// The report.
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	fmt.Fprintf(w, "\n==== eosbench on %s: %d partitions, 1 instance, %d records, %d keys, 2 outputs per input ====\n",
		c.label, parts, c.records, c.keys)
	fmt.Fprintf(w, "drain (pre-produced input; timed from the first record handled to committed offsets = end offsets)\n")
	fmt.Fprintf(w, "  %-58s %12s %9s %10s %10s %9s\n", "row", "records/s", "wall", "CPU here", "CPU broker", "outputs")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-58s %12.0f %9v %10s %10s %9s\n", r.label, r.rate, r.wall.Round(time.Millisecond),
			fmt.Sprintf("%.2f", r.self), coresStr(r.broker), r.outputsStr())
	}
	for _, v := range intervals {
		if v.err != nil {
			fmt.Fprintf(w, "  %-58s %s\n", v.label, v.err)
		}
	}
	fmt.Fprintf(w, "ratios: (c)/(a) = %.3f", cDefault.rate/a.rate)
	if b != nil {
		fmt.Fprintf(w, "   (c)/(b) = %.3f   (b)/(a) = %.3f", cDefault.rate/b.rate, b.rate/a.rate)
	}
	fmt.Fprintln(w)
	if aSync != nil {
		fmt.Fprintf(w, "        (a-sync)/(a) = %.3f   (c)/(a-sync) = %.3f\n", aSync.rate/a.rate, cDefault.rate/aSync.rate)
	}
	if d != nil {
		fmt.Fprintf(w, "        (c)/(d) = %.3f   (d)/(a) = %.3f   (%d stream threads)\n", cDefault.rate/d.rate, d.rate/a.rate, c.streamsThreads)
	}
	if streamsErr != nil {
		fmt.Fprintf(w, "  (d) Kafka Streams: not run: %v\n", streamsErr)
	}
	for _, r := range refs {
		fmt.Fprintf(w, "        %s: /(a) = %.3f, /(c) = %.2f\n", r.label, r.rate/a.rate, r.rate/cDefault.rate)
	}
	if c.latencyDur > 0 {
		fmt.Fprintf(w, "latency, input produce time -> output seen by a read_committed consumer, paced producer at %.0f records/s for %v\n", rate, c.latencyDur)
		if c.latencyRate <= 0 {
			fmt.Fprintf(w, "  (half the drain rate of (c) at the default settings)\n")
		}
		fmt.Fprintf(w, "  (inputs of the first %v are not counted)\n", c.latencyWarm)
		printLatencies(w, append(warmRow, lats...))
		for _, l := range lats {
			if l.res == nil || len(l.res.stages) == 0 {
				continue
			}
			fmt.Fprintf(w, "  where the latency of %s goes (%d inputs traced; p50 and p99 of each stage on its own):\n", l.label, l.res.traced)
			for _, s := range l.res.stages {
				fmt.Fprintf(w, "    %-58s %9v %9v\n", s.name, round(s.p50), round(s.p99))
			}
			if l.res.commits != "" {
				fmt.Fprintf(w, "    %s\n", l.res.commits)
			}
		}
	}
	if len(peers) > 0 {
		fmt.Fprintf(w, "latency beside Kafka Streams, paced producer at %.0f records/s for %v (half the drain rate of (d), or the load above if lower; untraced rows)\n", peerRate, c.latencyDur+c.brokerWarm)
		fmt.Fprintf(w, "  (inputs of the first %v are not counted: the warm-up of a new JVM)\n", c.latencyWarm+c.brokerWarm)
		printLatencies(w, peers)
	}
	fmt.Fprintf(w, "where (c) spends its drain, from kgo hooks on every runner client (%d records, %.1f records per EndTxn)\n",
		c.records, float64(c.records)/float64(max(1, countKey(cDefault.reqs, 26))))
	printRequests(w, cDefault.reqs, cDefault.from, cDefault.to, c.records)
	if b != nil {
		fmt.Fprintf(w, "%s, from kgo hooks on its client: %.1f records per EndTxn\n", b.label, float64(c.records)/float64(max(1, countKey(b.reqs, 26))))
		printRequests(w, b.reqs, b.from, b.to, c.records)
	}
	for _, r := range refs {
		fmt.Fprintf(w, "%s: %.1f records per EndTxn\n", r.label, float64(c.records)/float64(max(1, countKey(r.reqs, 26))))
		printRequests(w, r.reqs, r.from, r.to, c.records)
	}
	if len(lats) > 0 && lats[0].res != nil && len(lats[0].res.reqs) > 0 {
		l := lats[0].res
		fmt.Fprintf(w, "(c) during its latency row (%.0f records/s offered)\n", l.offered)
		printRequests(w, l.reqs, l.from, l.to, l.sent)
	}
	if rst != nil {
		fmt.Fprintf(w, "cold restore of one changelog partition, %d records of 100-byte values\n", rst.records)
		fmt.Fprintf(w, "  plain read_committed read  %10.0f records/s (%v)\n", rst.plainRate, rst.plain.Round(time.Millisecond))
		fmt.Fprintf(w, "  changelog.Restore to store %10.0f records/s (%v)\n", rst.restoreRate, rst.restore.Round(time.Millisecond))
		fmt.Fprintf(w, "  ratio Restore/plain = %.3f\n", rst.restoreRate/rst.plainRate)
	}
	if c.cpuProfile != "" {
		fmt.Fprintf(w, "CPU profile of this process during the drain of (c): %s (%.2f cores used)\n", c.cpuProfile, cDefault.self)
		fmt.Fprint(w, pprofTop(c.cpuProfile))
	}
	if c.latencyProfile != "" && len(lats) > 0 && lats[0].res != nil {
		fmt.Fprintf(w, "CPU profile of this process during the latency row of (c): %s (%.2f cores used, with the paced producer and the reader)\n", c.latencyProfile, lats[0].res.self)
		fmt.Fprint(w, pprofTop(c.latencyProfile))
	}
	return nil
}

func countKey(reqs []req, key int16) int {
	n := 0
	for _, r := range reqs {
		if r.key == key {
			n++
		}
	}
	return n
}

// latRow is a latency row of the report: its result or why it did not run.
type latRow struct {
	label string
	res   *latResult
	err   error
}

// printLatencies prints the table of latency rows, then the windows of
// each that hold a latency above its p99.
func printLatencies(w io.Writer, rows []latRow) {
	fmt.Fprintf(w, "  %-58s %9s %9s %9s %9s %9s %6s %6s %6s\n", "row", "offered/s", "p50", "p99", "max", "samples", "CPU", "broker", "all")
	for _, l := range rows {
		if l.err != nil {
			fmt.Fprintf(w, "  %-58s %s\n", l.label, l.err)
			continue
		}
		fmt.Fprintf(w, "  %-58s %9.0f %9v %9v %9v %9d %6.2f %6s %6s\n", l.label, l.res.offered, round(l.res.p50), round(l.res.p99), round(l.res.max), l.res.samples,
			l.res.self, coresStr(l.res.broker), coresStr(l.res.machine))
	}
	fmt.Fprintf(w, "  (CPU: cores used while the paced producer ran, by this process (processor, paced producer and reader), the broker, and every process of the machine)\n")
	for _, l := range rows {
		if l.res != nil && l.res.worst != "" {
			fmt.Fprintf(w, "  %s: %s\n", l.label, l.res.worst)
		}
	}
}

func coresStr(f float64) string {
	if f < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", f)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "# %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

type drainResult struct {
	label    string
	rate     float64
	wall     time.Duration
	self     float64
	broker   float64
	outputs  int
	verified bool
	want     int
	reqs     []req
	from, to time.Time
}

func (r *drainResult) outputsStr() string {
	if !r.verified {
		return "-"
	}
	return fmt.Sprintf("%d", r.outputs)
}

// drain runs p over the pre-produced input in and times it from the first
// record it handles until its committed offsets reach ends.
func drain(ctx context.Context, e *env, c config, p processor, in string, ends map[int32]int64, stats *reqStats, profile string) (*drainResult, error) {
	out, group := e.name("out"), e.name("group")
	if err := e.createTopic(ctx, out, int32(c.partitions), false); err != nil {
		return nil, err
	}
	res := &drainResult{label: p.label}
	var (
		once    sync.Once
		c0      cpu
		profErr error
		profF   *os.File
	)
	started := func() {
		once.Do(func() {
			if profile != "" {
				if profF, profErr = os.Create(profile); profErr == nil {
					profErr = pprof.StartCPUProfile(profF)
				}
			}
			if stats != nil {
				stats.record(true)
			}
			c0 = e.cpuNow()
		})
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.run(pctx, job{env: e, in: in, out: out, group: group, started: started}) }()
	if err := e.waitCommitted(ctx, group, in, ends, errc, c.drainTimeout); err != nil {
		return nil, err
	}
	c1 := e.cpuNow()
	if profile != "" && profErr == nil {
		pprof.StopCPUProfile()
		profErr = profF.Close()
	}
	if profErr != nil {
		return nil, fmt.Errorf("cpu profile %s: %w", profile, profErr)
	}
	if stats != nil {
		res.reqs = stats.record(false)
	}
	res.from, res.to = c0.at, c1.at
	res.wall = c1.at.Sub(c0.at)
	res.rate = float64(c.records) / res.wall.Seconds()
	res.self, res.broker = cores(c0, c1)
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			return nil, fmt.Errorf("processor ended with: %w", err)
		}
	case <-time.After(2 * time.Minute):
		return nil, errors.New("processor did not stop within 2m")
	}
	if c.verify {
		vctx, vcancel := context.WithTimeout(ctx, 5*time.Minute)
		defer vcancel()
		n, err := e.countCommitted(vctx, out)
		if err != nil {
			return nil, fmt.Errorf("counting outputs: %w", err)
		}
		res.outputs, res.verified, res.want = n, true, 2*c.records
		if n != 2*c.records {
			return nil, fmt.Errorf("output topic %s holds %d committed records, want %d (2 per input)", out, n, 2*c.records)
		}
	}
	return res, nil
}

// pprofTop returns the flat top 15 of the profile and the cumulative top of
// the project's own functions.
func pprofTop(profile string) string {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Sprintf("  (no executable for pprof: %v)\n", err)
	}
	var b strings.Builder
	for _, args := range [][]string{
		{"tool", "pprof", "-top", "-nodecount=15", exe, profile},
		{"tool", "pprof", "-top", "-cum", "-nodecount=400", exe, profile},
	} {
		cmd := exec.Command("go", args...)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(&b, "  (go %s: %v: %s)\n", strings.Join(args, " "), err, stderr.String())
			continue
		}
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		if args[3] == "-cum" {
			b.WriteString("  cumulative, the project's functions and the kgo calls they wait in (top 25):\n")
			n := 0
			for _, l := range lines {
				if n < 25 && (strings.Contains(l, "flechtwerk/") || strings.Contains(l, "kgo.(*Client).") || strings.Contains(l, "pebble.(*DB)")) {
					b.WriteString("  " + l + "\n")
					n++
				}
			}
			continue
		}
		for _, l := range lines {
			b.WriteString("  " + l + "\n")
		}
	}
	return b.String()
}

// parseIntervals parses the -intervals flag: comma-separated durations.
func parseIntervals(s string) ([]time.Duration, error) {
	var ds []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-intervals: %q is not a positive duration", f)
		}
		ds = append(ds, d)
	}
	return ds, nil
}
