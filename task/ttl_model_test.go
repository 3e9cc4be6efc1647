package task

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
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

const fuzzTTL = 64 * time.Millisecond

func fuzzExpiry(at int64) int64 {
	x := at + fuzzTTL.Milliseconds()
	g := max(fuzzTTL.Milliseconds()/64, 1)
	q := x / g
	if x%g > 0 {
		q++
	}
	return q * g
}

func fuzzStage() *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		v := string(rec.Value)
		off := rec.Offset
		if v == "del" {
			e.DeleteState()
			e.Send("out", rec.Key, fmt.Appendf(nil, "rec %d del %d", off, e.StreamTime().UnixMilli()))
			return nil
		}
		// mv (a write) and mk (no write) move the key's timer "mv",
		// later or earlier; cx cancels it.
		if ms, ok := strings.CutPrefix(v, "mk:"); ok {
			d, _ := strconv.Atoi(ms)
			e.SetTimer("mv", rec.Timestamp.Add(time.Duration(d)*time.Millisecond))
			e.Send("out", rec.Key, fmt.Appendf(nil, "rec %d keep %d", off, e.StreamTime().UnixMilli()))
			return nil
		}
		if ms, ok := strings.CutPrefix(v, "nk:"); ok {
			d, _ := strconv.Atoi(ms)
			e.SetTimer("nv", rec.Timestamp.Add(time.Duration(d)*time.Millisecond))
			e.Send("out", rec.Key, fmt.Appendf(nil, "rec %d keep %d", off, e.StreamTime().UnixMilli()))
			return nil
		}
		if v == "cz" {
			e.CancelTimer("nv")
			e.Send("out", rec.Key, fmt.Appendf(nil, "rec %d keep %d", off, e.StreamTime().UnixMilli()))
			return nil
		}
		e.SetState(n + 1)
		if v == "cy" {
			e.CancelTimer("nv")
		} else if ms, ok := strings.CutPrefix(v, "nv:"); ok {
			d, _ := strconv.Atoi(ms)
			e.SetTimer("nv", rec.Timestamp.Add(time.Duration(d)*time.Millisecond))
		} else if v == "cx" {
			e.CancelTimer("mv")
		} else if ms, ok := strings.CutPrefix(v, "mv:"); ok {
			d, _ := strconv.Atoi(ms)
			e.SetTimer("mv", rec.Timestamp.Add(time.Duration(d)*time.Millisecond))
		} else if name, ms, ok := strings.Cut(v, ":"); ok {
			d, _ := strconv.Atoi(ms)
			e.SetTimer(fmt.Sprintf("%s%d", name, off), rec.Timestamp.Add(time.Duration(d)*time.Millisecond))
		}
		e.Send("out", rec.Key, fmt.Appendf(nil, "rec %d %d %d", off, n+1, e.StreamTime().UnixMilli()))
		return nil
	}, transformer.StateTTL(fuzzTTL, transformer.EventTime),
		transformer.OnTimer(func(_ context.Context, tm transformer.Timer, n int, e *transformer.Emitter[int]) error {
			if tm.Name == "nv" {
				// Keep: no state write; re-set at an odd due.
				re := ""
				if tm.Due.UnixMilli()%2 == 1 {
					e.SetTimer("nv", tm.Due.Add(37*time.Millisecond))
					re = " re"
				}
				e.Send("out", tm.Key, fmt.Appendf(nil, "tik %s %d %d%s", tm.Name, tm.Due.UnixMilli(), e.StreamTime().UnixMilli(), re))
				return nil
			}
			if strings.HasPrefix(tm.Name, "ud") {
				e.DeleteState()
				e.Send("out", tm.Key, fmt.Appendf(nil, "tim %s %d %d", tm.Name, tm.Due.UnixMilli(), e.StreamTime().UnixMilli()))
				return nil
			}
			if !e.HadState() {
				n = 0
			}
			e.SetState(n + 1)
			e.Send("out", tm.Key, fmt.Appendf(nil, "tim %s %d %d %d", tm.Name, tm.Due.UnixMilli(), n+1, e.StreamTime().UnixMilli()))
			return nil
		}),
		transformer.OnExpire(func(_ context.Context, key []byte, n int, o *transformer.Outputs) error {
			o.Send("out", key, fmt.Appendf(nil, "exp %d %d", n, o.StreamTime().UnixMilli()))
			return nil
		}))
}

type fuzzHarness struct {
	t        *testing.T
	dir      string
	stage    *transformer.Stage[int] // nil: fuzzStage
	tk       *Task
	txnOpen  bool
	openOuts []*kgo.Record
	outs     []*kgo.Record
	openTags []int
	tags     []int // batch of each committed output
	batches  int
	cursor   int // next record to process
	commit   int // committed cursor
	pending  int // cursor after the open transaction
}

func (h *fuzzHarness) open() {
	t := h.t
	if h.stage == nil {
		h.stage = fuzzStage()
	}
	tr, ok := stage.TransformerOf(h.stage)
	require.True(t, ok)
	def, err := store.Open(context.Background(), filepath.Join(h.dir, "default"), store.Options{})
	require.NoError(t, err)
	tim, err := store.Open(context.Background(), filepath.Join(h.dir, "timers"), store.Options{Timers: true})
	require.NoError(t, err)
	h.tk = &Task{stores: []*store.Store{def}, topics: []string{"c"}, names: []string{""}, timers: tim, proc: tr, sp: tr.(process.Stores)}
	h.tk.open = newOpen(1)
	h.tk.stream, _ = tim.StreamTime()
}

func (h *fuzzHarness) close() {
	require.NoError(h.t, h.tk.stores[0].Close())
	require.NoError(h.t, h.tk.timers.Close())
}

func (h *fuzzHarness) add(b *Batch) {
	if b.Empty() {
		return
	}
	t, o := h.tk, &h.tk.open
	h.txnOpen = true
	h.batches++
	h.openOuts = append(h.openOuts, b.outputs...)
	for range b.outputs {
		h.openTags = append(h.openTags, h.batches)
	}
	for _, w := range b.writes {
		o.stores[0].put(w)
	}
	for _, op := range b.timers {
		o.timers.put(op)
	}
	if b.advanced {
		t.stream = b.stream
		o.streamAdvanced = true
	}
}

// commitOpen is CommitOpen without Kafka.
func (h *fuzzHarness) commitOpen() {
	t := h.tk
	h.commit = h.cursor
	if !h.txnOpen {
		t.open = newOpen(1)
		return
	}
	o := t.open
	var (
		tws  []store.Write
		prep *store.Prepared
	)
	if len(o.timers.m) > 0 || o.streamAdvanced {
		tws = o.timers.writes()
		if o.streamAdvanced {
			tws = append(tws, store.Write{Key: store.StreamTimeKey, Value: store.StreamTimeValue(t.stream)})
		}
		p, err := t.timers.Prepare(tws)
		require.NoError(h.t, err)
		if len(p.Writes()) > 0 || len(h.openOuts) > 0 || o.hasStoreWrites() {
			prep, tws = p, p.Writes()
		}
	}
	t.open = o.next()
	if len(o.stores[0].m) > 0 {
		require.NoError(h.t, t.stores[0].Apply(o.stores[0].writes()))
	}
	if prep != nil {
		require.NoError(h.t, t.timers.ApplyPrepared(prep))
	} else if len(tws) > 0 {
		require.NoError(h.t, t.timers.Apply(tws))
	}
	t.last = o.stores[0].m
	h.outs = append(h.outs, h.openOuts...)
	h.tags = append(h.tags, h.openTags...)
	h.openOuts, h.openTags, h.txnOpen = nil, nil, false
}

// abort drops the open transaction and re-initialises the task (a new
// Task on the same stores, which hold what was committed).
func (h *fuzzHarness) abort() {
	h.openOuts, h.openTags, h.txnOpen = nil, nil, false
	h.close()
	h.open()
	h.cursor = h.commit
}

// TestStateTTLModel runs random inputs (writes, deletes, timers that
// set or delete state, two timers moved later or earlier with and
// without a state write and cancelled, one of whose callbacks writes no
// state and sets it again) through a task with StateTTL in random
// batches, ticks, commits and aborts that re-open the task on its
// committed stores, with MaxTimers unbounded, 1 or 2, and checks the
// committed outputs against a model: every record's output once, no
// expiry before a TTL after the key's last write, no timer before or
// after its due time, none overdue, timers in due order, and the
// stores, stamps and timers (at the due times the stamps carry)
// agreeing at the end.
// STATE_TTL_MODEL_SEEDS sets the number of seeds (100).
func TestStateTTLModel(t *testing.T) {
	seeds := 100
	if s := os.Getenv("STATE_TTL_MODEL_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	for seed := range seeds {
		t.Run(strconv.Itoa(seed), func(t *testing.T) { fuzzOnce(t, int64(seed)) })
	}
}

func fuzzOnce(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	keys := []string{"a", "b", "c", "d"}[:1+rng.Intn(4)]
	n := 20 + rng.Intn(80)
	var recs []*kgo.Record
	ts := int64(1000)
	for i := range n {
		ts += int64(rng.Intn(40))
		at := ts
		if rng.Intn(10) == 0 {
			at -= int64(rng.Intn(100))
		}
		v := "v"
		switch rng.Intn(19) {
		case 14, 15:
			v = fmt.Sprintf("nv:%d", 1+rng.Intn(120))
		case 16:
			v = fmt.Sprintf("nk:%d", 1+rng.Intn(120))
		case 17:
			v = "cy"
		case 18:
			v = "cz"
		case 0:
			v = "del"
		case 1:
			v = fmt.Sprintf("us:%d", 1+rng.Intn(120))
		case 2:
			v = fmt.Sprintf("ud:%d", 1+rng.Intn(120))
		case 3, 4, 5:
			v = fmt.Sprintf("mv:%d", 1+rng.Intn(120))
		case 6:
			v = fmt.Sprintf("mk:%d", 1+rng.Intn(120))
		case 7:
			v = "cx"
		}
		recs = append(recs, &kgo.Record{Topic: "in", Offset: int64(i), Key: []byte(keys[rng.Intn(len(keys))]), Value: []byte(v), Timestamp: time.UnixMilli(at)})
	}
	h := &fuzzHarness{t: t, dir: t.TempDir()}
	h.open()
	defer func() { h.close() }()
	maxTimers := []int{-1, 1, 2}[rng.Intn(3)]
	sem := make(chan struct{}, 4)
	ctx := context.Background()
	for h.cursor < len(recs) {
		h.tk.cfg.MaxTimers = maxTimers
		switch r := rng.Intn(20); {
		case r < 2:
			b, err := h.tk.Tick(ctx, sem)
			require.NoError(t, err)
			h.add(b)
		case r < 3:
			h.abort()
			continue
		default:
			end := min(len(recs), h.cursor+1+rng.Intn(8))
			b, err := h.tk.Process(ctx, recs[h.cursor:end], sem)
			require.NoError(t, err)
			h.add(b)
			h.cursor = end
		}
		if rng.Intn(3) == 0 {
			h.commitOpen()
		}
	}
	h.commitOpen()
	// Drain the due timers.
	for range 1000 {
		h.tk.cfg.MaxTimers = maxTimers
		due, err := h.tk.TimersDue()
		require.NoError(t, err)
		if !due {
			break
		}
		b, err := h.tk.Tick(ctx, sem)
		require.NoError(t, err)
		h.add(b)
		h.commitOpen()
	}
	checkFuzz(t, recs, h)
}

type fuzzKey struct {
	batch  int
	fired  map[string]bool
	exists bool
	count  int
	last   int64
	timers map[string]int64
}

func checkFuzz(t *testing.T, recs []*kgo.Record, h *fuzzHarness) {
	sb := make([]int64, len(recs)) // stream time before each record
	st := int64(0)
	for i, r := range recs {
		sb[i] = st
		st = max(st, r.Timestamp.UnixMilli())
	}
	final := st
	require.Equal(t, final, h.tk.stream)
	model := map[string]*fuzzKey{}
	get := func(k string) *fuzzKey {
		if model[k] == nil {
			model[k] = &fuzzKey{timers: map[string]int64{}}
		}
		return model[k]
	}
	seen := map[int64]bool{}
	var log []string
	// due timers of k (ttl included) that should have fired before
	// time upTo, or before the timer (due, name) at upTo.
	overdue := func(k string, m *fuzzKey, upTo int64, due int64, name string) string {
		if m.exists && !m.fired["\x00ttl"] && fuzzExpiry(m.last) <= upTo && (fuzzExpiry(m.last) < due || fuzzExpiry(m.last) == due && "\x00ttl" < name) {
			return fmt.Sprintf("expiry of %s due %d (last write %d) not fired", k, fuzzExpiry(m.last), m.last)
		}
		for nm, d := range m.timers {
			if nm != name && !m.fired[nm] && d <= upTo && (d < due || d == due && nm < name) {
				return fmt.Sprintf("timer %s of %s due %d not fired", nm, k, d)
			}
		}
		return ""
	}
	for i, o := range h.outs {
		k := string(o.Key)
		m := get(k)
		if m.batch != h.tags[i] {
			m.batch, m.fired = h.tags[i], map[string]bool{}
		}
		f := strings.Fields(string(o.Value))
		log = append(log, fmt.Sprintf("[b%d] %s: %s", h.tags[i], k, o.Value))
		fail := func(msg string) { t.Fatalf("%s\nlog:\n%s", msg, strings.Join(log, "\n")) }
		switch f[0] {
		case "rec":
			off, _ := strconv.ParseInt(f[1], 10, 64)
			if seen[off] {
				fail(fmt.Sprintf("record %d twice", off))
			}
			seen[off] = true
			if s := overdue(k, m, sb[off], math.MaxInt64, ""); s != "" {
				fail("before record " + f[1] + " (stream before " + strconv.FormatInt(sb[off], 10) + "): " + s)
			}
			if f[2] == "del" {
				m.exists = false
				continue
			}
			if f[2] == "keep" {
				v := string(recs[off].Value)
				if v == "cz" {
					delete(m.timers, "nv")
					continue
				}
				nm := "mv"
				if strings.HasPrefix(v, "nk:") {
					nm = "nv"
				}
				d, _ := strconv.Atoi(v[3:])
				m.timers[nm] = recs[off].Timestamp.UnixMilli() + int64(d)
				continue
			}
			n, _ := strconv.Atoi(f[2])
			want := 1
			if m.exists {
				want = m.count + 1
			}
			if n != want {
				fail(fmt.Sprintf("record %d: count %d, want %d", off, n, want))
			}
			sa, _ := strconv.ParseInt(f[3], 10, 64)
			m.exists, m.count, m.last = true, n, sa
			if v := string(recs[off].Value); v == "cy" {
				delete(m.timers, "nv")
			} else if ms, ok := strings.CutPrefix(v, "nv:"); ok {
				d, _ := strconv.Atoi(ms)
				m.timers["nv"] = recs[off].Timestamp.UnixMilli() + int64(d)
			} else if v == "cx" {
				delete(m.timers, "mv")
			} else if ms, ok := strings.CutPrefix(v, "mv:"); ok {
				d, _ := strconv.Atoi(ms)
				m.timers["mv"] = recs[off].Timestamp.UnixMilli() + int64(d)
			} else if name, ms, ok := strings.Cut(v, ":"); ok {
				d, _ := strconv.Atoi(ms)
				m.timers[name+f[1]] = recs[off].Timestamp.UnixMilli() + int64(d)
			}
		case "tim":
			due, _ := strconv.ParseInt(f[2], 10, 64)
			if d, ok := m.timers[f[1]]; !ok || d != due {
				fail(fmt.Sprintf("timer %s due %d fired, model has %v", f[1], due, m.timers))
			}
			at, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
			if due > at {
				fail(fmt.Sprintf("timer %s due %d fired early at %d", f[1], due, at))
			}
			if s := overdue(k, m, at, due, f[1]); s != "" {
				fail("before timer " + f[1] + ": " + s)
			}
			delete(m.timers, f[1])
			m.fired[f[1]] = true
			if strings.HasPrefix(f[1], "ud") {
				m.exists = false
				continue
			}
			n, _ := strconv.Atoi(f[3])
			want := 1
			if m.exists {
				want = m.count + 1
			}
			if n != want {
				fail(fmt.Sprintf("timer us: count %d, want %d", n, want))
			}
			m.exists, m.count, m.last = true, n, at
		case "tik":
			due, _ := strconv.ParseInt(f[2], 10, 64)
			if d, ok := m.timers[f[1]]; !ok || d != due {
				fail(fmt.Sprintf("timer %s due %d fired, model has %v", f[1], due, m.timers))
			}
			at, _ := strconv.ParseInt(f[3], 10, 64)
			if due > at {
				fail(fmt.Sprintf("timer %s due %d fired early at %d", f[1], due, at))
			}
			if s := overdue(k, m, at, due, f[1]); s != "" {
				fail("before timer " + f[1] + ": " + s)
			}
			delete(m.timers, f[1])
			m.fired[f[1]] = true
			if len(f) > 4 {
				m.timers[f[1]] = due + 37
			}
		case "exp":
			n, _ := strconv.Atoi(f[1])
			at, _ := strconv.ParseInt(f[2], 10, 64)
			if !m.exists || n != m.count {
				fail(fmt.Sprintf("expired %s n=%d; model exists=%v count=%d", k, n, m.exists, m.count))
			}
			if e := fuzzExpiry(m.last); at < e {
				fail(fmt.Sprintf("expired %s at %d before its expiry %d (last write %d)", k, at, e, m.last))
			}
			if s := overdue(k, m, at, fuzzExpiry(m.last), "\x00ttl"); s != "" {
				fail("before expiry: " + s)
			}
			if o.Timestamp.UnixMilli() < fuzzExpiry(m.last) {
				fail(fmt.Sprintf("expiry output of %s stamped %d, before its expiry %d", k, o.Timestamp.UnixMilli(), fuzzExpiry(m.last)))
			}
			m.exists = false
			m.fired["\x00ttl"] = true
		}
	}
	for i := range recs {
		require.True(t, seen[int64(i)], "record %d has no output", i)
	}
	for k, m := range model {
		m.fired = nil
		if s := overdue(k, m, final, math.MaxInt64, ""); s != "" {
			t.Fatalf("after the drain (stream %d): %s\nlog:\n%s", final, s, strings.Join(log, "\n"))
		}
		// The pending timers, at their due times: those the state
		// carries at the stamp's (stamp.Due).
		sb, _, err := h.tk.stores[0].StampOf([]byte(k))
		require.NoError(t, err)
		s, _ := stamp.Decode(sb)
		pending := map[string]int64{}
		require.NoError(t, h.tk.timers.KeyTimers([]byte(k), func(name string, kind uint8, due int64) (bool, error) {
			if name[0] != 0 {
				_, pending[name] = stamp.Due(s, name, process.TimeKind(kind), due)
			}
			return true, nil
		}))
		require.Equal(t, m.timers, pending, "pending timers of key %s\nlog:\n%s", k, strings.Join(log, "\n"))
		v, ok, err := h.tk.stores[0].Get([]byte(k))
		require.NoError(t, err)
		require.Equal(t, m.exists, ok, "key %s state", k)
		if ok {
			require.Equal(t, strconv.Itoa(m.count), string(v), "key %s", k)
			sb, ok, err := h.tk.stores[0].StampOf([]byte(k))
			require.NoError(t, err)
			require.True(t, ok, "key %s has no stamp", k)
			s, _ := stamp.Decode(sb)
			var ttl []int64
			require.NoError(t, h.tk.timers.KeyTimers([]byte(k), func(name string, _ uint8, due int64) (bool, error) {
				if name == "\x00ttl" {
					ttl = append(ttl, due)
				}
				return true, nil
			}))
			if len(ttl) != 1 || ttl[0] > fuzzExpiry(s.At) {
				t.Fatalf("key %s stamped %d (expiry %d): expiry timers %v\nlog:\n%s", k, s.At, fuzzExpiry(s.At), ttl, strings.Join(log, "\n"))
			}
		}
	}
	_ = slices.Clone[[]int64]
}
