package chaos

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChaosExactlyOnce runs three sequencer processes of one application
// while SIGKILLs land mid-transaction, right after commits, at random and
// during startup, and one process is frozen past its session timeout and
// woken after its tasks moved (a zombie). A read_committed reader must then
// see every input's effect exactly once, each key's seq exactly 1..count,
// state restored from the changelog equal to the counts, and the group's
// committed offsets at the input's end.
func TestChaosExactlyOnce(t *testing.T) {
	cfg := loadConfig(t, "sequencer")
	require.GreaterOrEqual(t, cfg.partitions, int32(6), "CHAOS_PARTITIONS: the chaos suite needs at least 6 partitions")
	runExact(t, cfg)
}

// TestChaosSharedProducer runs the chaos suite in the shared-producer
// mode (runner.SharedProducer) over the sequencer with -timers: one
// transaction per instance and interval spans all its tasks, with their
// outputs, state, named store and timer writes, and the group's
// generation, not a transactional ID per task, fences an instance that
// lost its partitions. Kills land while the shared transaction is open
// or committing and between timers firing and its commit, zombies freeze
// past the session timeout with it open (and wake to a refused commit),
// graceful stops commit it for all tasks. With CHAOS_STANDBY (the
// transaction version 2 run) standby replicas follow the changelogs.
func TestChaosSharedProducer(t *testing.T) {
	cfg := loadConfig(t, "sequencer")
	require.GreaterOrEqual(t, cfg.partitions, int32(6), "CHAOS_PARTITIONS: the chaos suite needs at least 6 partitions")
	cfg.records = min(cfg.records, 12000)
	cfg.extra = append([]string{"-shared-producer", "-timers"}, cfg.extra...)
	runExact(t, cfg)
}

// runExact runs the harness with cfg and requires exactly-once: no
// duplicate, no gap, every key's sequence exact, the restored state equal
// to the counts, the committed offsets at the input's end, and every
// planned fault landed.
func runExact(t *testing.T, cfg config) {
	t.Helper()
	h := newHarness(t, cfg)
	res := h.run()
	line := summary(h, res)
	t.Log(line)
	fmt.Println(line)

	for _, p := range res.problems {
		t.Errorf("chaos: %s", p)
	}
	require.Zero(t, res.duplicates, "duplicates")
	require.Zero(t, res.gaps, "gaps")
	require.True(t, res.seqExact, "every key's seq runs exactly 1..count")
	require.True(t, res.stateExact, "restored state equals the counts")
	require.True(t, res.offsetsExact, "committed offsets equal the input end offsets")
	require.GreaterOrEqual(t, int(h.fleet.kills.Load()), cfg.kills, "kills that landed")
	require.Len(t, h.zombieNotes, cfg.zombies, "zombies")
	require.Empty(t, h.stopFailures, "graceful stops under chaos end cleanly")
}

// TestChaosLongCommitInterval runs the chaos suite with a 1s commit
// interval: a task's transaction spans many polls, so kills, zombies and
// stops land while it holds records of several polls (and state only in
// its overlay).
func TestChaosLongCommitInterval(t *testing.T) {
	cfg := loadConfig(t, "sequencer")
	cfg.records = min(cfg.records, 12000)
	cfg.extra = append([]string{"-commit-interval", "1s"}, cfg.extra...)
	runExact(t, cfg)
}

// TestChaosTimers runs the chaos suite over the sequencer with -timers:
// every output is emitted by an event-time timer the record set (with a
// named store entry the callback reads and deletes), so kills, zombies and
// stops land between timers firing and their commit. Every timer's output
// must be visible exactly once, each key's seq exactly 1..count, and the
// state restored from the changelog equal to the counts.
func TestChaosTimers(t *testing.T) {
	cfg := loadConfig(t, "sequencer")
	cfg.records = min(cfg.records, 12000)
	cfg.extra = append([]string{"-timers"}, cfg.extra...)
	runExact(t, cfg)
}

// TestChaosCatchesNaive runs the same harness over ./naive, a processor
// that produces without transactions and commits its offsets afterwards
// (300ms later). Kills in that window must show up as duplicates: a harness
// that cannot fail proves nothing.
func TestChaosCatchesNaive(t *testing.T) {
	cfg := loadConfig(t, "naive")
	cfg.records = min(cfg.records, 6000)
	cfg.kills = 3
	cfg.zombies = 1
	cfg.stops = 0
	cfg.duration = 4 * (cfg.session + 2*time.Second)
	// Random kills: the naive processor spends nearly all its time
	// between produce and commit.
	cfg.modes = []killMode{killRandom}
	h := newHarness(t, cfg)
	res := h.run()
	line := summary(h, res)
	t.Log(line)
	fmt.Println(line)

	require.Positive(t, res.duplicates, "the harness must catch the naive processor's duplicates")
	require.False(t, res.seqExact, "the naive processor's in-memory counters restart at 1")
	t.Logf("chaos: naive processor: %d duplicates, %d gaps", res.duplicates, res.gaps)
}

// summary is the run's one-line result.
func summary(h *harness, res result) string {
	state := "n/a"
	if res.stateChecked {
		state = fmt.Sprint(res.stateExact)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: broker=%s records=%d processes=%d kills=%d zombies=%d duplicates=%d gaps=%d seq_exact=%t state_exact=%s",
		h.c.Kind(), h.cfg.records, h.cfg.processes, h.fleet.kills.Load(), len(h.zombieNotes), res.duplicates, res.gaps, res.seqExact, state)
	if h.summaryExtra != nil {
		b.WriteString(" " + h.summaryExtra())
	}
	if res.timedOut {
		b.WriteString(" timeout=true")
	}
	if h.cfg.standby > 0 && h.cfg.processor == "sequencer" { // the naive processor has no standbys
		fmt.Fprintf(&b, " standby=%d", h.cfg.standby)
	}
	restarts, rejoins := h.fleet.recoveries()
	fmt.Fprintf(&b, " offsets_exact=%t stops=%d exits=%d task_restarts=%d rejoins=%d processor=%s seed=%d elapsed=%v",
		res.offsetsExact, h.stops, len(h.fleet.unexpectedExits()), restarts, rejoins, h.cfg.processor, h.cfg.seed, time.Since(h.begun).Round(100*time.Millisecond))
	return b.String()
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o755) }
