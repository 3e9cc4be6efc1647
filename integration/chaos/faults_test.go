package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// killMode says when a SIGKILL lands.
type killMode string

const (
	// killMidTxn kills the owner of a task whose transaction is open with
	// records in it: the task's changelog partition has a high watermark
	// above its last stable offset (only task N writes changelog
	// partition N).
	killMidTxn killMode = "mid-txn"
	// killAfterCommit kills the owner of a partition right after the
	// group's committed offset of the partition moved.
	killAfterCommit killMode = "after-commit"
	// killRandom kills a random process after a random delay: in a batch,
	// a rebalance, a restore or a poll.
	killRandom killMode = "random"
	// killStartup kills the most recently started process early in its
	// life: while it joins, fences or restores.
	killStartup killMode = "startup"
)

type event struct {
	zombie bool
	stop   bool // a graceful stop (SIGTERM) and restart
	mode   killMode
}

// plan returns the run's faults in order: the kills in a rotation of modes,
// the zombies spread between them.
func (h *harness) plan() []event {
	cfg := h.cfg
	rotation := cfg.modes
	if len(rotation) == 0 {
		rotation = []killMode{killMidTxn, killAfterCommit, killRandom, killStartup}
	}
	off := h.rng.intN(len(rotation))
	var evs []event
	for i := range cfg.kills {
		evs = append(evs, event{mode: rotation[(off+i)%len(rotation)]})
	}
	for j := range cfg.stops {
		at := (j + 1) * len(evs) / (cfg.stops + 1)
		evs = slices.Insert(evs, at, event{stop: true})
	}
	for j := range cfg.zombies {
		at := (2*j + 1) * len(evs) / (2*cfg.zombies + 1)
		evs = slices.Insert(evs, at, event{zombie: true})
	}
	return evs
}

// chaos runs the plan. Fault i waits until i/(faults+1) of the inputs the
// feeder releases during the chaos are committed, so the faults spread over
// the run and every one of them hits a group with work to do.
func (h *harness) chaos(ctx context.Context) {
	t := h.t
	evs := h.plan()
	span := int64(h.cfg.records - h.reserve())
	for i, ev := range evs {
		threshold := int64(i+1) * span / int64(len(evs)+1)
		for h.committed.Load() < threshold && ctx.Err() == nil {
			sleep(ctx, 10*time.Millisecond)
		}
		sleep(ctx, h.rng.between(100*time.Millisecond, 1200*time.Millisecond))
		if ctx.Err() != nil {
			t.Errorf("chaos: timed out before fault %d of %d (committed %d, produced %d)\n%s",
				i+1, len(evs), h.committed.Load(), h.produced.Load(), h.fleet.tails(15))
			return
		}
		h.settle(ctx)
		switch {
		case ev.zombie:
			h.zombie(ctx)
		case ev.stop:
			h.stop(ctx)
		default:
			h.kill(ctx, ev.mode)
		}
	}
}

// kill SIGKILLs one process at a moment chosen by mode and restarts it.
func (h *harness) kill(ctx context.Context, mode killMode) {
	var (
		p    *proc
		note string
	)
	switch mode {
	case killMidTxn:
		p, note = h.waitMidTxn(ctx, 10*time.Second)
	case killAfterCommit:
		p, note = h.waitAfterCommit(ctx, 10*time.Second)
	case killStartup:
		p = h.newest()
		if p != nil && time.Since(p.started) > time.Second {
			// Nothing starting now: make a start to kill.
			if h.fleet.kill(p, h.beforeRestart(ctx, p, 0)) {
				h.note(fmt.Sprintf("kill %d: startup (preparing) slot %d gen %d at %v", h.fleet.kills.Load(), p.slot, p.gen,
					time.Since(h.begun).Round(time.Millisecond)))
			}
			p = h.newest()
			if !h.c.Real {
				// kfake: only once it joined (see settle).
				h.settle(ctx)
			}
		}
		if p != nil {
			at := p.started.Add(h.rng.between(50*time.Millisecond, 1500*time.Millisecond))
			sleep(ctx, time.Until(at))
			note = fmt.Sprintf("%v after its start", time.Since(p.started).Round(time.Millisecond))
		}
	case killRandom:
		sleep(ctx, h.rng.between(0, 1500*time.Millisecond))
		// Mostly a process that owns tasks; sometimes any process (one
		// that is joining, restoring or idle).
		if h.rng.intN(4) > 0 {
			p, _ = h.target(ctx, nil)
		}
	}
	if p == nil {
		ps := h.live()
		if len(ps) == 0 {
			h.t.Logf("chaos: no live process to kill")
			return
		}
		p = ps[h.rng.intN(len(ps))]
		if mode != killRandom {
			note += " (fell back to a random process)"
		} else {
			note = "any process"
		}
	}
	restart := h.beforeRestart(ctx, p, h.rng.between(0, 700*time.Millisecond))
	if mode == killRandom && note == "" {
		note = "a task owner"
	}
	if h.fleet.kill(p, restart) {
		h.note(fmt.Sprintf("kill %d: %s slot %d gen %d at %v: %s", h.fleet.kills.Load(), mode, p.slot, p.gen,
			time.Since(h.begun).Round(time.Millisecond), strings.TrimSpace(note)))
	}
}

// settle, on kfake only, waits until the group is stable with exactly the
// live processes as members, evicting the members of processes that died
// (see evict). kfake's classic group coordinator does not survive a member
// dying during a rebalance: it keeps running the session timers of members
// blocked in JoinGroup or SyncGroup and drops them unanswered when they
// fire, and a member dropped while its SyncGroup waits (for a dead leader)
// skews its count of joined members, so later rebalances wait for their
// whole rebalance timeout, which every join and drop re-arms (see
// TestKfakeDeadLeaderStallsGroupUnlessEvicted). Apache Kafka keeps members
// awaiting a join or sync alive, so against it every fault lands whenever
// it falls, rebalances included.
func (h *harness) settle(ctx context.Context) {
	if h.c.Real {
		return
	}
	deadline := time.Now().Add(3*h.cfg.session + 10*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var want []string
		for _, p := range h.live() {
			want = append(want, p.clientID)
		}
		slices.Sort(want)
		state, clients, _, err := h.groupView(ctx)
		if err == nil && state == "Stable" && slices.Equal(clients, want) {
			return
		}
		for _, id := range clients {
			if p := h.fleet.byClientID(id); p == nil || isExited(p) {
				h.evict(ctx, id)
			}
		}
		sleep(ctx, 20*time.Millisecond)
	}
	h.t.Logf("chaos: kfake group did not settle within %v", 3*h.cfg.session+10*time.Second)
}

// beforeRestart returns what to wait for before a killed process restarts:
// delay. On kfake, first the dead member's eviction from the group, which
// Apache Kafka does by the session timeout: left to kfake's, a dead leader
// or a live member timed out while blocked in JoinGroup or SyncGroup can
// stall the group (see settle).
func (h *harness) beforeRestart(ctx context.Context, p *proc, delay time.Duration) func() {
	return func() {
		if !h.c.Real {
			h.evict(ctx, p.clientID)
		}
		sleep(ctx, delay)
	}
}

// evict removes the members of the dead process with client ID id from the
// group (kfake only) and logs what it did.
func (h *harness) evict(ctx context.Context, id string) {
	removed, err := h.c.Evict(ctx, h.app, id)
	switch {
	case err != nil:
		h.t.Logf("chaos: evicting %s from the kfake group: %v", id, err)
	case len(removed) > 0:
		h.t.Logf("chaos: evicted %s (member %s) from the kfake group", id, strings.Join(removed, ", "))
	}
}

func isExited(p *proc) bool {
	_, done := isClosed(p.exited)
	return done
}

func (h *harness) note(msg string) {
	h.killNotes = append(h.killNotes, msg)
	h.t.Logf("chaos: %s (committed %d/%d)", msg, h.committed.Load(), h.cfg.records)
}

// newest returns the live process started last.
func (h *harness) newest() *proc {
	var p *proc
	for _, q := range h.live() {
		if p == nil || q.started.After(p.started) {
			p = q
		}
	}
	return p
}

// live returns the current processes that run and are not stopped.
func (h *harness) live() []*proc {
	var out []*proc
	for _, p := range h.fleet.procs() {
		if p == nil || p.stopped.Load() {
			continue
		}
		if _, done := isClosed(p.exited); !done {
			out = append(out, p)
		}
	}
	return out
}

// target picks a live process that owns partitions, keeping prev while it
// still does.
func (h *harness) target(ctx context.Context, prev *proc) (*proc, []int32) {
	own, _, err := h.owners(ctx)
	if err != nil {
		return nil, nil
	}
	var cands []*proc
	for p, parts := range own {
		if p.stopped.Load() || len(parts) == 0 {
			continue
		}
		if _, done := isClosed(p.exited); done {
			continue
		}
		if p == prev {
			return p, parts
		}
		cands = append(cands, p)
	}
	if len(cands) == 0 {
		return nil, nil
	}
	slices.SortFunc(cands, func(a, b *proc) int { return a.slot - b.slot })
	p := cands[h.rng.intN(len(cands))]
	return p, own[p]
}

// waitMidTxn waits until a task of a live process has an open transaction
// with records in it and returns that process.
func (h *harness) waitMidTxn(ctx context.Context, limit time.Duration) (*proc, string) {
	deadline := time.Now().Add(limit)
	var (
		p       *proc
		parts   []int32
		checked time.Time
	)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p == nil || time.Since(checked) > 300*time.Millisecond {
			p, parts = h.target(ctx, p)
			checked = time.Now()
		}
		if p == nil {
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		// High watermark first: the last stable offset only grows, so
		// lso < hwm means a transaction was open when lso was read.
		hwm, err1 := h.listOffsets(ctx, h.c.Adm.ListEndOffsets, h.changelog())
		lso, err2 := h.listOffsets(ctx, h.c.Adm.ListCommittedOffsets, h.changelog())
		if err1 == nil && err2 == nil {
			for _, part := range parts {
				if lso[part] < hwm[part] {
					return p, fmt.Sprintf("task %d transaction open (changelog hwm %d > lso %d)", part, hwm[part], lso[part])
				}
			}
		}
		sleep(ctx, 2*time.Millisecond)
	}
	return nil, "no open transaction seen within " + limit.String()
}

// waitAfterCommit waits until the committed offset of a partition of a live
// process moves and returns that process.
func (h *harness) waitAfterCommit(ctx context.Context, limit time.Duration) (*proc, string) {
	deadline := time.Now().Add(limit)
	var (
		p       *proc
		parts   []int32
		checked time.Time
		base    map[int32]int64
	)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p == nil || time.Since(checked) > 300*time.Millisecond {
			p, parts = h.target(ctx, p)
			checked = time.Now()
		}
		if p == nil {
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		offs, ok := h.groupOffsets(ctx)
		if ok {
			if base != nil {
				for _, part := range parts {
					if offs[part] > base[part] {
						return p, fmt.Sprintf("partition %d committed %d -> %d", part, base[part], offs[part])
					}
				}
			}
			base = offs
		}
		sleep(ctx, 2*time.Millisecond)
	}
	return nil, "no commit seen within " + limit.String()
}

func (h *harness) listOffsets(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string) (map[int32]int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	offs, err := list(rctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var ferr error
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
			return
		}
		out[o.Partition] = o.Offset
	})
	return out, ferr
}

// zombie SIGSTOPs a process that owns partitions (in an open transaction
// when one is seen), waits until the group moved its partitions to the
// others and they committed past where it stood, then SIGCONTs it.
func (h *harness) zombie(ctx context.Context) {
	t := h.t
	var p *proc
	var parts []int32
	note := "at a random moment"
	if h.cfg.processor == "sequencer" {
		var n string
		if p, n = h.waitMidTxn(ctx, 8*time.Second); p != nil {
			note = n
		}
	}
	if own, _, err := h.owners(ctx); err == nil && p != nil {
		parts = own[p]
	}
	if p == nil {
		p, parts = h.target(ctx, nil)
	}
	if p == nil {
		ps := h.live()
		if len(ps) == 0 {
			t.Errorf("chaos: no live process to make a zombie of")
			return
		}
		p = ps[h.rng.intN(len(ps))]
	}
	before, _ := h.groupOffsets(ctx)
	p.stopped.Store(true)
	if !h.signalOrLog(p, syscall.SIGSTOP) {
		p.stopped.Store(false)
		return
	}
	stoppedAt := time.Now()
	t.Logf("chaos: zombie: SIGSTOP slot %d gen %d (partitions %v) %s", p.slot, p.gen, parts, note)

	// Early: wake as soon as the group dropped the zombie, racing the new
	// owners' fence and restore. Late: wake once the new owners committed.
	early := h.rng.intN(2) == 0
	wake := "after the new owners committed"
	if early {
		wake = "as soon as the group dropped it"
	}
	limit := 20*h.cfg.session + 60*time.Second
	moved := false
	for time.Since(stoppedAt) < limit && ctx.Err() == nil {
		state, clients, assigned, err := h.groupView(ctx)
		if early && err == nil && time.Since(stoppedAt) > h.cfg.session && !slices.Contains(clients, p.clientID) {
			moved = true
			break
		}
		if err == nil && time.Since(stoppedAt) > h.cfg.session && state == "Stable" && !slices.Contains(clients, p.clientID) && assigned == int(h.cfg.partitions) {
			now, ok := h.groupOffsets(ctx)
			ends := h.ends(int(h.produced.Load()))
			progressed := ok
			for _, part := range parts {
				if ok && now[part] <= before[part] && now[part] < ends[part] {
					progressed = false
				}
			}
			if progressed {
				moved = true
				break
			}
		}
		sleep(ctx, 20*time.Millisecond)
	}
	if !moved {
		t.Errorf("chaos: zombie slot %d gen %d: the group did not move its partitions %v within %v\n%s",
			p.slot, p.gen, parts, limit, h.fleet.tails(15))
	}
	stoppedFor := time.Since(stoppedAt).Round(time.Millisecond)
	h.signalOrLog(p, syscall.SIGCONT)
	p.stopped.Store(false)

	// Watch what the zombie does once it wakes up.
	fate := "still running after it woke (rejoined the group)"
	select {
	case <-p.exited:
		fate = fmt.Sprintf("exited by itself (%v): %s", p.err, lastError(p.log))
	case <-time.After(2*h.cfg.session + 5*time.Second):
	case <-ctx.Done():
	}
	msg := fmt.Sprintf("zombie slot %d gen %d: stopped %v for %v, partitions %v moved=%v, woken %s; then %s",
		p.slot, p.gen, note, stoppedFor, parts, moved, wake, fate)
	h.zombieNotes = append(h.zombieNotes, msg)
	t.Logf("chaos: %s", msg)
}

// stop ends a process gracefully (SIGTERM: it finishes its batch, leaves
// the group) and restarts it.
func (h *harness) stop(ctx context.Context) {
	p, _ := h.target(ctx, nil)
	if p == nil {
		ps := h.live()
		if len(ps) == 0 {
			return
		}
		p = ps[h.rng.intN(len(ps))]
	}
	sleep(ctx, h.rng.between(0, time.Second))
	p.expected.Store(true)
	if !h.signalOrLog(p, syscall.SIGTERM) {
		return
	}
	began := time.Now()
	outcome := "exited cleanly"
	select {
	case <-p.exited:
		if p.err != nil {
			outcome = fmt.Sprintf("exited with %v: %s", p.err, lastError(p.log))
			h.stopFailures = append(h.stopFailures, fmt.Sprintf("slot %d gen %d: %s", p.slot, p.gen, outcome))
		}
	case <-time.After(60 * time.Second):
		outcome = "did not exit within 60s of SIGTERM; killed"
		h.stopFailures = append(h.stopFailures, fmt.Sprintf("slot %d gen %d: %s", p.slot, p.gen, outcome))
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
	h.stops++
	h.fleet.restartIfCurrent(p)
	h.note(fmt.Sprintf("stop %d: SIGTERM slot %d gen %d at %v: %s after %v", h.stops, p.slot, p.gen,
		time.Since(h.begun).Round(time.Millisecond), outcome, time.Since(began).Round(time.Millisecond)))
}

// lastError returns the last line of log that reports an error.
func lastError(log string) string {
	lines := strings.Split(tail(log, 200), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "level=ERROR") || strings.Contains(lines[i], "err=") {
			return lines[i]
		}
	}
	return "(no error logged)"
}
