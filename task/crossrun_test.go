package task

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// xcfg is one run's configuration of the stage.
type xcfg struct {
	ttl     process.TimeKind // 0: no StateTTL
	ttlDur  time.Duration
	onTimer bool
	plain   bool // no stores, timers nor TTL
	store   bool // a named store with StoreTTL, written under the key
}

func (c xcfg) String() string {
	if c.plain {
		return "plain"
	}
	return fmt.Sprintf("ttl=%d/%v onTimer=%v store=%v", c.ttl, c.ttlDur, c.onTimer, c.store)
}

var xStore = transformer.NewStore[int]("ns", nil, transformer.StoreTTL(40*time.Millisecond, transformer.EventTime))

func xStage(c xcfg) *transformer.Stage[int] {
	var opts []transformer.Opt
	if !c.plain {
		if c.ttl != 0 {
			opts = append(opts, transformer.StateTTL(c.ttlDur, c.ttl))
		}
		if c.onTimer {
			opts = append(opts, transformer.OnTimer(func(_ context.Context, tm transformer.Timer, n int, e *transformer.Emitter[int]) error {
				switch tm.Due.UnixMilli() % 8 {
				case 5:
					e.SetState(n + 1)
					e.SetTimer("y", tm.Due.Add(20*time.Millisecond))
					e.CancelTimer("x")
				case 6:
					e.SetTimer("x", tm.Due.Add(70*time.Millisecond))
					e.CancelTimer("y")
				case 7:
					e.DeleteState()
					e.SetState(n + 7)
					e.SetTimer("y", tm.Due.Add(10*time.Millisecond))
				case 0:
					e.SetState(n + 1)
				case 2:
					e.SetState(n + 1)
					e.SetTimer(tm.Name, tm.Due.Add(50*time.Millisecond))
				case 3:
					e.SetTimer(tm.Name, tm.Due.Add(30*time.Millisecond))
				case 4:
					e.DeleteState()
				}
				return nil
			}))
		}
		if c.store {
			opts = append(opts, transformer.Stores(xStore))
		} else if len(opts) == 0 {
			opts = append(opts, transformer.Stores())
		}
	}
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		f := strings.Split(string(rec.Value), ":")
		tm := func(i int) bool { return c.onTimer && !c.plain && len(f) > i }
		at := func(i int) time.Time {
			d, _ := strconv.Atoi(f[i])
			return rec.Timestamp.Add(time.Duration(d) * time.Millisecond)
		}
		if c.store && !c.plain {
			if err := xStore.Put(e, rec.Key, n); err != nil {
				return err
			}
		}
		switch f[0] {
		case "s":
			e.SetState(n + 1)
		case "st":
			e.SetState(n + 1)
			if tm(2) {
				e.SetTimer(f[1], at(2))
			}
		case "sw":
			e.SetState(n + 1)
			if tm(1) {
				e.SetWallTimer(f[1], time.Now().Add(time.Hour))
			}
		case "t":
			if tm(2) {
				e.SetTimer(f[1], at(2))
			}
		case "c":
			if tm(1) {
				e.CancelTimer(f[1])
			}
		case "sc":
			e.SetState(n + 1)
			if tm(1) {
				e.CancelTimer(f[1])
			}
		case "d":
			e.DeleteState()
		case "m":
			// many timers, several ops on one
			e.SetState(n + 1)
			if tm(1) {
				for i := range 10 {
					e.SetTimer(fmt.Sprintf("m%d", i), at(1).Add(time.Duration(i)*time.Millisecond))
				}
				e.SetTimer("x", at(1))
				e.CancelTimer("x")
				e.SetTimer("x", at(1).Add(5*time.Millisecond))
			}
		case "dt":
			e.DeleteState()
			if tm(2) {
				e.SetTimer(f[1], at(2))
			}
		case "ds":
			e.DeleteState()
			e.SetState(n + 3)
			if tm(2) {
				e.SetTimer(f[1], at(2))
			}
		case "tt":
			if tm(2) {
				e.SetTimer(f[1], at(2))
				e.SetTimer(f[1], at(2).Add(-20*time.Millisecond))
			}
		}
		return nil
	}, opts...)
}

// xOpen opens a task of stage c on the stores in dir (a plain stage has
// no timer store, as a task of it opens none).
func xOpen(t *testing.T, dir string, c xcfg) *fuzzHarness {
	h := &fuzzHarness{t: t, dir: dir, stage: xStage(c)}
	tr, ok := stage.TransformerOf(h.stage)
	require.True(t, ok)
	def, err := store.Open(context.Background(), filepath.Join(dir, "default"), store.Options{})
	require.NoError(t, err)
	h.tk = &Task{stores: []*store.Store{def}, topics: []string{"c"}, names: []string{""}, proc: tr}
	nst := 1
	if sp, ok := tr.(process.Stores); ok {
		h.tk.sp = sp
		tim, err := store.Open(context.Background(), filepath.Join(dir, "timers"), store.Options{Timers: true})
		require.NoError(t, err)
		h.tk.timers = tim
		h.tk.stream, _ = tim.StreamTime()
		for range sp.Stores() {
			ns, err := store.Open(context.Background(), filepath.Join(dir, "ns"), store.Options{})
			require.NoError(t, err)
			h.tk.stores = append(h.tk.stores, ns)
			h.tk.topics, h.tk.names = append(h.tk.topics, "ns-c"), append(h.tk.names, "ns")
			nst++
		}
	}
	h.tk.open = newOpen(nst)
	return h
}

func xClose(h *fuzzHarness) {
	for _, s := range h.tk.stores {
		require.NoError(h.t, s.Close())
	}
	if h.tk.timers != nil {
		require.NoError(h.t, h.tk.timers.Close())
	}
}

// xAdd is fuzzHarness.add with the named stores.
func xAdd(h *fuzzHarness, b *Batch) {
	if b.Empty() {
		return
	}
	h.txnOpen = true
	for _, w := range b.named {
		h.tk.open.stores[w.Store+1].put(store.Write{Key: w.Key, Value: w.Value, Delete: w.Delete})
	}
	h.add(b)
}

// xCommit is fuzzHarness.commitOpen with the named stores.
func xCommit(h *fuzzHarness) {
	o := h.tk.open
	for i := 1; i < len(o.stores); i++ {
		if len(o.stores[i].m) > 0 {
			require.NoError(h.t, h.tk.stores[i].Apply(o.stores[i].writes()))
		}
	}
	h.commitOpen()
	h.tk.open = o.next()
}

// effTimer is the timer (key, name) as the task has it: its open
// transaction's operation over the timer store, a hint resolved as
// Prepare will.
func effTimer(h *fuzzHarness, key []byte, name string) (process.Timer, bool) {
	var (
		com   process.Timer
		found bool
	)
	require.NoError(h.t, h.tk.timers.KeyTimers(key, func(n string, kind uint8, due int64) (bool, error) {
		if n == name {
			com, found = process.Timer{Key: key, Name: n, Kind: process.TimeKind(kind), Due: due}, true
		}
		return true, nil
	}))
	op, ok := h.tk.open.timers.m[string(store.TimerKey(key, name))]
	switch {
	case !ok:
		return com, found
	case op.Cancel:
		return process.Timer{}, false
	case op.Hint && found && com.Kind == op.Kind && com.Due <= op.Due:
		return com, true
	}
	return op.Timer, true
}

// xStamp is key's state stamp as the task reads it (open transaction,
// then store), and whether the key has state.
func xStamp(h *fuzzHarness, key string) ([]byte, bool) {
	if w, ok := h.tk.open.stores[0].m[key]; ok {
		return w.Stamp, !w.Delete
	}
	_, ok, err := h.tk.stores[0].Get([]byte(key))
	require.NoError(h.t, err)
	sb, _, err := h.tk.stores[0].StampOf([]byte(key))
	require.NoError(h.t, err)
	return sb, ok
}

// xCheck checks the rule of Stamped.Recent for every key whose stamp
// this run wrote (written): each timer its stamp carries, and the TTL
// expiry it implies, has a timer at or before it.
func xCheck(h *fuzzHarness, c xcfg, written map[string]bool, log []string) {
	if c.plain {
		return
	}
	keys := make([]string, 0, len(written))
	for k := range written {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sb, ok := xStamp(h, k)
		if !ok {
			continue
		}
		s, ok := stamp.Decode(sb)
		if !ok {
			continue
		}
		fail := func(msg string, a ...any) {
			h.t.Fatalf("run %v: key %s, stamp %+v: %s\nlog:\n%s", c, k, s, fmt.Sprintf(msg, a...), strings.Join(log, "\n"))
		}
		for _, ct := range s.Timers {
			tm, ok := effTimer(h, []byte(k), ct.Name)
			if !ok || tm.Kind != ct.Kind || tm.Due > ct.Due {
				fail("carried timer %s (%d, %d): timer store has %+v (%v)", ct.Name, ct.Kind, ct.Due, tm, ok)
			}
		}
		if c.ttl != 0 && s.Kind == c.ttl {
			exp, _ := h.tk.sp.(interface {
				StateExpiry(process.Stamp) (int64, bool)
			}).StateExpiry(s)
			tm, ok := effTimer(h, []byte(k), "\x00ttl")
			if !ok || tm.Kind != c.ttl || tm.Due > exp {
				fail("expiry %d: timer store has %+v (%v)", exp, tm, ok)
			}
		}
	}
}

// writtenBy adds the keys b writes with a stamp to written.
func writtenBy(b *Batch, written map[string]bool) {
	for _, w := range b.writes {
		if len(w.Stamp) > 0 && !w.Delete {
			written[string(w.Key)] = true
		}
	}
}

// TestStampRuleAcrossRuns checks the rule that lets a batch skip a hint
// (batch.Stamped.Recent) over random runs of one task's stores whose
// stage configuration changes from run to run (TTL off, event time or
// wall clock, OnTimer or not, a named store with StoreTTL, a plain
// stage), with ticks, commits, aborts and MaxTimers of 1, 2 or none:
// after every batch and commit, each timer that a stamp written in the
// run carries, and the expiry it implies, has a timer due no later.
// CROSS_RUN_SEEDS sets the number of seeds (60).
func TestStampRuleAcrossRuns(t *testing.T) {
	seeds := 60
	if s := os.Getenv("CROSS_RUN_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	for seed := range seeds {
		t.Run(strconv.Itoa(seed), func(t *testing.T) { xrunOnce(t, int64(seed)) })
	}
}

func xrunOnce(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	cfgOf := func() xcfg {
		if rng.Intn(8) == 0 {
			return xcfg{plain: true}
		}
		c := xcfg{onTimer: rng.Intn(3) > 0, store: rng.Intn(4) == 0}
		switch rng.Intn(4) {
		case 1, 2:
			c.ttl, c.ttlDur = process.EventTime, []time.Duration{64 * time.Millisecond, 128 * time.Millisecond}[rng.Intn(2)]
		case 3:
			c.ttl, c.ttlDur = process.WallClock, []time.Duration{time.Hour, 30 * time.Millisecond}[rng.Intn(2)]
		}
		return c
	}
	dir := t.TempDir()
	c := cfgOf()
	h := xOpen(t, dir, c)
	defer func() { xClose(h) }()
	written := map[string]bool{}
	var log []string
	ts := int64(1000)
	keys := []string{"a", "b", "c"}[:1+rng.Intn(3)]
	names := []string{"x", "y"}
	sem := make(chan struct{}, 4)
	ctx := context.Background()
	log = append(log, "open "+c.String())
	for step := 0; step < 120; step++ {
		h.tk.cfg.MaxTimers = []int{-1, 1, 2}[rng.Intn(3)]
		switch r := rng.Intn(30); {
		case r < 2:
			xCommit(h)
			xClose(h)
			c = cfgOf()
			h = xOpen(t, dir, c)
			written = map[string]bool{}
			log = append(log, "reopen "+c.String())
			continue
		case r < 3:
			xClose(h)
			h = xOpen(t, dir, c)
			written = map[string]bool{}
			h.txnOpen = false
			log = append(log, "abort")
			continue
		case r < 4:
			time.Sleep(time.Duration(rng.Intn(20)) * time.Millisecond)
			continue
		case r < 6:
			if c.plain {
				continue
			}
			b, err := h.tk.Tick(ctx, sem)
			require.NoError(t, err)
			writtenBy(b, written)
			xAdd(h, b)
			log = append(log, fmt.Sprintf("tick -> %d timer ops %v", len(b.timers), b.timers))
		default:
			var recs []*kgo.Record
			for range 1 + rng.Intn(4) {
				ts += int64(rng.Intn(30))
				nm := names[rng.Intn(len(names))]
				v := []string{"s", "st:" + nm + ":" + strconv.Itoa(1+rng.Intn(150)), "t:" + nm + ":" + strconv.Itoa(1+rng.Intn(150)),
					"c:" + nm, "sc:" + nm, "d", "n", "sw:" + nm, "m:" + strconv.Itoa(1+rng.Intn(150)), "dt:" + nm + ":" + strconv.Itoa(1+rng.Intn(150)),
					"ds:" + nm + ":" + strconv.Itoa(1+rng.Intn(150)), "tt:" + nm + ":" + strconv.Itoa(1+rng.Intn(150))}[rng.Intn(12)]
				recs = append(recs, &kgo.Record{Topic: "in", Key: []byte(keys[rng.Intn(len(keys))]), Value: []byte(v), Timestamp: time.UnixMilli(ts)})
			}
			b, err := h.tk.Process(ctx, recs, sem)
			require.NoError(t, err)
			writtenBy(b, written)
			var desc []string
			for _, r := range recs {
				desc = append(desc, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Timestamp.UnixMilli()))
			}
			xAdd(h, b)
			log = append(log, fmt.Sprintf("batch %v -> timer ops %v", desc, b.timers))
		}
		xCheck(h, c, written, log)
		if rng.Intn(3) == 0 {
			xCommit(h)
			log = append(log, "commit")
			xCheck(h, c, written, log)
		}
	}
}
