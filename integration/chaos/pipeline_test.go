package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/flechtwerk/flechtwerk/runner"
)

// The pipeline processor (./pipeline) is built once per test binary.
var (
	pipelineOnce sync.Once
	pipelineErr  error
)

func pipelineBinary(t testing.TB) string {
	t.Helper()
	pipelineOnce.Do(func() {
		args := []string{"build", "-o", filepath.Join(binDir, "pipeline")}
		if os.Getenv("CHAOS_RACE") != "" {
			args = append(args, "-race")
		}
		args = append(args, "./pipeline")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			pipelineErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	require.NoError(t, pipelineErr)
	return filepath.Join(binDir, "pipeline")
}

// pipelineRun is one chaos run of the three-stage pipeline (see
// ./pipeline): input -> stamp -> rekey -> count -> output, each process
// running every stage.
type pipelineRun struct {
	*harness
	words int
	// hops are the stages' groups and the topics they read, in order.
	hops [3]struct{ group, topic string }

	mu          sync.Mutex
	regressions []string
}

func newPipelineRun(t *testing.T) *pipelineRun {
	cfg := loadConfig(t, "pipeline")
	// Modest by default: the whole suite must stay short.
	cfg.records = envInt(t, "CHAOS_PIPELINE_RECORDS", 6000)
	cfg.kills = envInt(t, "CHAOS_PIPELINE_KILLS", 4)
	// Apache Kafka moves a frozen process's tasks later than kfake (its
	// session timeout runs in full): pace longer, so that the faults after
	// the zombie still hit a busy pipeline.
	paced := 15 * time.Second
	if os.Getenv("KAFKA_BROKERS") != "" {
		paced = 25 * time.Second
	}
	cfg.duration = envDuration(t, "CHAOS_PIPELINE_DURATION", paced)
	cfg.timeout = envDuration(t, "CHAOS_TIMEOUT", 4*time.Minute)
	words := envInt(t, "CHAOS_PIPELINE_WORDS", 13)
	// CHAOS_PROCESSOR_ARGS are the sequencer's; CHAOS_PIPELINE_ARGS are
	// extra flags of ./pipeline.
	cfg.extra = append(strings.Fields(os.Getenv("CHAOS_PIPELINE_ARGS")), "-words", strconv.Itoa(words))
	r := &pipelineRun{harness: newHarness(t, cfg), words: words}
	r.hops[0].group, r.hops[0].topic = r.app+"-stamp", r.in
	r.hops[1].group, r.hops[1].topic = r.app+"-rekey", runner.RepartitionTopic(r.app+"-rekey", "stamped")
	r.hops[2].group, r.hops[2].topic = r.app+"-count", runner.RepartitionTopic(r.app+"-count", "words")
	return r
}

// TestChaosPipelineExactlyOnce runs three processes of a three-stage
// pipeline (input topic -> stamp, a count per input key -> rekey, by a word
// derived from the input -> count, per word) while SIGKILLs land (at
// random and during startup), one process stops gracefully, and one is
// frozen past its session timeout and woken after its tasks moved (a
// zombie). A read_committed reader of the output must then see every input
// exactly once, each input key's stamp exactly 1..count, each word's count
// exactly 1..count and final count exact; every stage's group must have
// committed its input's end.
func TestChaosPipelineExactlyOnce(t *testing.T) {
	r := newPipelineRun(t)
	res := r.run()
	line := r.pipelineSummary(res)
	t.Log(line)
	fmt.Println(line)
	for _, p := range res.problems {
		t.Errorf("chaos: %s", p)
	}
	require.Zero(t, res.duplicates, "duplicates")
	require.Zero(t, res.gaps, "gaps")
	require.True(t, res.seqExact, "every word's count and every input key's stamp run exactly 1..count")
	require.True(t, res.offsetsExact, "every stage committed its input's end")
	require.GreaterOrEqual(t, int(r.fleet.kills.Load()), r.cfg.kills, "kills that landed")
	require.Len(t, r.zombieNotes, r.cfg.zombies, "zombies")
	require.Empty(t, r.stopFailures, "graceful stops under chaos end cleanly")
}

func (r *pipelineRun) pipelineSummary(res result) string {
	restarts, rejoins := r.fleet.recoveries()
	s := fmt.Sprintf("chaos: pipeline broker=%s stages=3 records=%d processes=%d kills=%d zombies=%d stops=%d duplicates=%d gaps=%d seq_exact=%t offsets_exact=%t exits=%d task_restarts=%d rejoins=%d seed=%d elapsed=%v",
		r.c.Kind(), r.cfg.records, r.cfg.processes, r.fleet.kills.Load(), len(r.zombieNotes), r.stops, res.duplicates, res.gaps,
		res.seqExact, res.offsetsExact, len(r.fleet.unexpectedExits()), restarts, rejoins, r.cfg.seed, time.Since(r.begun).Round(100*time.Millisecond))
	if res.timedOut {
		s += " timeout=true"
	}
	return s
}

func (r *pipelineRun) run() result {
	t := r.t
	cfg := r.cfg
	bin := pipelineBinary(t)
	r.c.CreateTopic(t, r.in, cfg.partitions)
	r.c.CreateTopic(t, r.out, cfg.partitions)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	r.begun = time.Now()
	r.fleet = newFleet(t, bin, r.dir, r.processorArgs)
	for i := range cfg.processes {
		r.fleet.start(i)
	}

	var wg sync.WaitGroup
	monCtx, stopMon := context.WithCancel(ctx)
	wg.Add(2)
	go func() { defer wg.Done(); r.monitorStages(monCtx) }()
	feedErr := make(chan error, 1)
	go func() { defer wg.Done(); feedErr <- r.feed(ctx) }()

	r.pipelineChaos(ctx)
	close(r.chaosDone)
	if err := <-feedErr; err != nil {
		stopMon()
		wg.Wait()
		t.Fatalf("chaos: producing input: %v\n%s", err, r.fleet.tails(15))
	}
	drained := r.waitStagesDrained(ctx)
	stopMon()
	wg.Wait()
	if bad := r.fleet.stop(30 * time.Second); len(bad) > 0 {
		t.Logf("chaos: processes that did not stop cleanly on SIGTERM:\n%s", strings.Join(bad, "\n"))
	}
	res := r.verifyPipeline()
	res.offsetsExact = drained
	if !drained {
		res.timedOut = true
		res.problems = append(res.problems, fmt.Sprintf("stages not drained within %v", cfg.timeout))
	}
	r.mu.Lock()
	res.problems = append(res.problems, r.regressions...)
	r.mu.Unlock()
	res.problems = append(res.problems, raceReports(r.dir)...)
	return res
}

// stageOffsets returns the committed offsets of group on topic.
func (r *pipelineRun) stageOffsets(ctx context.Context, group, topic string) (map[int32]int64, bool) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := r.c.Adm.FetchOffsets(rctx, group)
	if err != nil {
		return nil, false
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out, true
}

// monitorStages keeps r.committed at the first stage's committed inputs
// (the faults are spread by it) and checks that no stage's committed
// offset ever moves backwards.
func (r *pipelineRun) monitorStages(ctx context.Context) {
	high := map[string]int64{}
	for ctx.Err() == nil {
		for i, hop := range r.hops {
			offs, ok := r.stageOffsets(ctx, hop.group, hop.topic)
			if !ok {
				continue
			}
			var sum int64
			for p, o := range offs {
				sum += o
				k := fmt.Sprintf("%s/%d", hop.group, p)
				if o < high[k] && fellBack(ctx, r.c, hop.group, hop.topic, p, high[k]) {
					r.mu.Lock()
					r.regressions = append(r.regressions, fmt.Sprintf("committed offset of %s partition %d fell back from %d to %d",
						hop.group, p, high[k], o))
					r.mu.Unlock()
				}
				high[k] = max(high[k], o)
			}
			if i == 0 {
				r.committed.Store(sum)
			}
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// waitStagesDrained waits until each stage, in order, committed the end
// of its input: once a stage has, the next stage's input is final.
func (r *pipelineRun) waitStagesDrained(ctx context.Context) bool {
	for i, hop := range r.hops {
		var want map[int32]int64
		if i == 0 {
			want = r.ends(r.cfg.records)
		}
		for {
			if ctx.Err() != nil {
				r.t.Errorf("chaos: stage %s did not drain %s within %v\n%s", hop.group, hop.topic, r.cfg.timeout, r.fleet.tails(20))
				return false
			}
			if i > 0 && want == nil {
				ends, err := r.listOffsets(ctx, r.c.Adm.ListEndOffsets, hop.topic)
				if err == nil {
					want = ends
				}
			}
			if got, ok := r.stageOffsets(ctx, hop.group, hop.topic); ok && want != nil && equalOffsets(got, want) {
				r.t.Logf("chaos: stage %s drained after %v", hop.group, time.Since(r.begun).Round(time.Millisecond))
				break
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
	return true
}

// pipelineChaos runs the faults: kills (at random, during startup), one
// graceful stop per CHAOS_STOPS, zombies, spread over the first stage's
// progress.
func (r *pipelineRun) pipelineChaos(ctx context.Context) {
	type fault int
	const (
		killAny fault = iota
		killStarting
		stopOne
		zombieOne
	)
	var plan []fault
	for i := range r.cfg.kills {
		plan = append(plan, []fault{killAny, killStarting}[i%2])
	}
	for j := range r.cfg.stops {
		plan = slices.Insert(plan, (j+1)*len(plan)/(r.cfg.stops+1), stopOne)
	}
	for j := range r.cfg.zombies {
		plan = slices.Insert(plan, (2*j+1)*len(plan)/(2*r.cfg.zombies+1), zombieOne)
	}
	span := int64(r.cfg.records - r.reserve())
	for i, f := range plan {
		threshold := int64(i+1) * span / int64(len(plan)+1)
		for r.committed.Load() < threshold && ctx.Err() == nil {
			sleep(ctx, 10*time.Millisecond)
		}
		sleep(ctx, r.rng.between(50*time.Millisecond, 600*time.Millisecond))
		if ctx.Err() != nil {
			r.t.Errorf("chaos: timed out before fault %d of %d (committed %d, produced %d)\n%s",
				i+1, len(plan), r.committed.Load(), r.produced.Load(), r.fleet.tails(15))
			return
		}
		r.settleStages(ctx)
		switch f {
		case killAny:
			ps := r.live()
			if len(ps) == 0 {
				continue
			}
			p := ps[r.rng.intN(len(ps))]
			sleep(ctx, r.rng.between(0, time.Second))
			r.killAndRestart(ctx, p, "random")
		case killStarting:
			p := r.newest()
			if p == nil {
				continue
			}
			if time.Since(p.started) > time.Second {
				r.killAndRestart(ctx, p, "to make a start")
				r.settleStages(ctx)
				if p = r.newest(); p == nil {
					continue
				}
			}
			sleep(ctx, time.Until(p.started.Add(r.rng.between(50*time.Millisecond, 1500*time.Millisecond))))
			r.killAndRestart(ctx, p, "during its startup")
		case stopOne:
			r.stop(ctx)
		case zombieOne:
			r.pipelineZombie(ctx)
		}
	}
}

// killAndRestart SIGKILLs p and restarts its slot, on kfake after evicting
// its members from every stage's group.
func (r *pipelineRun) killAndRestart(ctx context.Context, p *proc, why string) {
	restart := func() {
		if !r.c.Real {
			for _, hop := range r.hops {
				if _, err := r.c.Evict(ctx, hop.group, p.clientID); err != nil {
					r.t.Logf("chaos: evicting %s from %s: %v", p.clientID, hop.group, err)
				}
			}
		}
		sleep(ctx, r.rng.between(0, 500*time.Millisecond))
	}
	if r.fleet.kill(p, restart) {
		r.note(fmt.Sprintf("kill %d: slot %d gen %d %s at %v", r.fleet.kills.Load(), p.slot, p.gen, why,
			time.Since(r.begun).Round(time.Millisecond)))
	}
}

// stageGroups describes every stage's group: its state and members' client
// ids.
func (r *pipelineRun) stageGroups(ctx context.Context) (map[string]kadm.DescribedGroup, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gs, err := r.c.Adm.DescribeGroups(rctx, r.hops[0].group, r.hops[1].group, r.hops[2].group)
	if err != nil {
		return nil, err
	}
	return gs, gs.Error()
}

// settleStages, on kfake only, waits until every stage's group is stable
// with exactly the live processes as members, evicting the members of
// dead processes (see settle).
func (r *pipelineRun) settleStages(ctx context.Context) {
	if r.c.Real {
		return
	}
	deadline := time.Now().Add(3*r.cfg.session + 10*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var want []string
		for _, p := range r.live() {
			want = append(want, p.clientID)
		}
		slices.Sort(want)
		gs, err := r.stageGroups(ctx)
		settled := err == nil
		for _, g := range gs {
			var clients []string
			for _, m := range g.Members {
				clients = append(clients, m.ClientID)
				if p := r.fleet.byClientID(m.ClientID); p == nil || isExited(p) {
					_, _ = r.c.Evict(ctx, g.Group, m.ClientID)
				}
			}
			slices.Sort(clients)
			settled = settled && g.State == "Stable" && slices.Equal(clients, want)
		}
		if settled {
			return
		}
		sleep(ctx, 20*time.Millisecond)
	}
	r.t.Logf("chaos: kfake groups did not settle within %v", 3*r.cfg.session+10*time.Second)
}

// pipelineZombie SIGSTOPs a process, waits until every stage's group
// dropped it (and, half the time, until the others committed more input),
// then SIGCONTs it and watches what it does.
func (r *pipelineRun) pipelineZombie(ctx context.Context) {
	t := r.t
	ps := r.live()
	if len(ps) < 2 {
		t.Errorf("chaos: too few live processes to make a zombie of")
		return
	}
	p := ps[r.rng.intN(len(ps))]
	before := r.committed.Load()
	p.stopped.Store(true)
	if !r.signalOrLog(p, syscall.SIGSTOP) {
		p.stopped.Store(false)
		return
	}
	stoppedAt := time.Now()
	early := r.rng.intN(2) == 0
	limit := 20*r.cfg.session + 60*time.Second
	moved := false
	for time.Since(stoppedAt) < limit && ctx.Err() == nil {
		gs, err := r.stageGroups(ctx)
		if err == nil && time.Since(stoppedAt) > r.cfg.session {
			dropped, stable := true, true
			for _, g := range gs {
				stable = stable && g.State == "Stable"
				for _, m := range g.Members {
					if m.ClientID == p.clientID {
						dropped = false
					}
				}
			}
			if dropped && (early || stable && (r.committed.Load() > before || r.committed.Load() >= int64(r.produced.Load()))) {
				moved = true
				break
			}
		}
		sleep(ctx, 20*time.Millisecond)
	}
	if !moved {
		t.Errorf("chaos: zombie slot %d gen %d: the groups did not drop it within %v\n%s", p.slot, p.gen, limit, r.fleet.tails(15))
	}
	stoppedFor := time.Since(stoppedAt).Round(time.Millisecond)
	r.signalOrLog(p, syscall.SIGCONT)
	p.stopped.Store(false)
	fate := "still running after it woke (rejoined the groups)"
	select {
	case <-p.exited:
		fate = fmt.Sprintf("exited by itself (%v): %s", p.err, lastError(p.log))
	case <-time.After(2*r.cfg.session + 5*time.Second):
	case <-ctx.Done():
	}
	msg := fmt.Sprintf("zombie slot %d gen %d: stopped for %v, early=%t, moved=%t; then %s", p.slot, p.gen, stoppedFor, early, moved, fate)
	r.zombieNotes = append(r.zombieNotes, msg)
	t.Logf("chaos: %s", msg)
}

// pipelineOutput is the value of an output record (see ./pipeline).
type pipelineOutput struct {
	Key  string `json:"key"`
	N    int64  `json:"n"`
	KSeq int64  `json:"kseq"`
	Word string `json:"word"`
	Seq  int64  `json:"seq"`
}

// verifyPipeline reads the output read_committed and checks that every
// input reached it exactly once, with each input key's stamps and each
// word's counts exactly 1..count.
func (r *pipelineRun) verifyPipeline() result {
	var res result
	seen := map[int64]int{}
	kseqs := map[string][]int64{}
	seqs := map[string][]int64{}
	for _, rec := range r.c.ReadCommitted(r.t, r.out) {
		var o pipelineOutput
		if err := json.Unmarshal(rec.Value, &o); err != nil {
			res.problems = append(res.problems, fmt.Sprintf("output %s/%d@%d: %v", rec.Topic, rec.Partition, rec.Offset, err))
			continue
		}
		if string(rec.Key) != o.Word || o.Word != "w"+strconv.FormatInt(o.N%int64(r.words), 10) {
			res.problems = append(res.problems, fmt.Sprintf("output of input %d has key %q, word %q", o.N, rec.Key, o.Word))
		}
		seen[o.N]++
		kseqs[o.Key] = append(kseqs[o.Key], o.KSeq)
		seqs[o.Word] = append(seqs[o.Word], o.Seq)
	}
	for n, c := range seen {
		if n < 0 || n >= int64(r.cfg.records) {
			res.problems = append(res.problems, fmt.Sprintf("output of unknown input %d", n))
		}
		res.duplicates += c - 1
	}
	for n := range int64(r.cfg.records) {
		if seen[n] == 0 {
			res.gaps++
		}
	}
	exact := func(got []int64, want int) bool {
		slices.Sort(got)
		if len(got) != want {
			return false
		}
		for i, s := range got {
			if s != int64(i+1) {
				return false
			}
		}
		return true
	}
	res.seqExact = true
	for k := range r.cfg.keys {
		if !exact(kseqs[r.key(k)], r.count(k, r.cfg.records)) {
			res.seqExact = false
			res.problems = append(res.problems, fmt.Sprintf("input key %s: %d stamps, want 1..%d", r.key(k), len(kseqs[r.key(k)]), r.count(k, r.cfg.records)))
		}
	}
	for w := range r.words {
		want := 0
		for n := w; n < r.cfg.records; n += r.words {
			want++
		}
		word := "w" + strconv.Itoa(w)
		if !exact(seqs[word], want) {
			res.seqExact = false
			res.problems = append(res.problems, fmt.Sprintf("word %s: %d counts (max %d), want exactly 1..%d", word, len(seqs[word]), slices.Max(append(seqs[word], 0)), want))
		}
	}
	return res
}
