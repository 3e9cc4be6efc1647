package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// trace follows inputs of a runner latency row (one in traceSample) through the runner:
// buffered by the consumer (a kgo hook), handed to the runner by the poll,
// transformed (the bench's transform), every output acknowledged by the
// broker (a kgo hook), the commit of its task's transaction (the task's
// "transaction committed" debug line: when End began and returned, and
// when the transaction began) and seen by the read_committed reader. It
// splits the latency into those stages, and computes when the output
// partitions' last stable offset let each output through if every
// transaction of every task that began before the output was written holds
// it back (Kafka's LSO: the first offset of the oldest open transaction on
// the partition; every task writes to every output partition).
var traceKgo = flag.Bool("trace-kgo", false, "latency rows of the runner also count what its clients log at debug level (slows them down)")

type trace struct {
	in, out string

	mu        sync.Mutex
	fetched   map[int64]time.Time
	appended  map[int64]time.Time // the broker's LogAppendTime of the input
	polled    map[int64]time.Time
	processed map[int64]procEv
	acked     map[int64]time.Time
	seen      map[int64]time.Time
	commits   map[int32][]commitEv
	// kgo, with -trace-kgo, counts what the runner's clients log.
	kgo *kgoCounter
}

type procEv struct {
	at        time.Time
	partition int32
}

type commitEv struct {
	began, start, end time.Time
	// produce and offsets: how long End waited for the records' results
	// and for the offsets to join; opening: how long the transaction took
	// to open (AddOffsetsToTxn, which waits for the previous one's markers).
	produce, offsets, opening time.Duration
}

func newTrace(in, out string) *trace {
	return &trace{in: in, out: out,
		fetched: map[int64]time.Time{}, appended: map[int64]time.Time{}, polled: map[int64]time.Time{}, processed: map[int64]procEv{},
		acked: map[int64]time.Time{}, seen: map[int64]time.Time{}, commits: map[int32][]commitEv{}}
}

// traceKey returns the key of a traced input (its produce time), false
// for inputs that are not traced: one in traceSample, chosen by a hash of
// the produce time, so the hooks of the others return before the lock and
// the maps stay small. Tracing every input took a fifth of the process's
// CPU at 54k records/s (six maps of a million entries behind one lock),
// which the untraced rows do not pay.
func traceKey(r *kgo.Record) (int64, bool) {
	t, ok := headerTime(r)
	if !ok {
		return 0, false
	}
	return t.UnixNano(), traced(t.UnixNano())
}

// traceSample: one input in this many is traced.
const traceSample = 32

func traced(k int64) bool { return (uint64(k)*0x9E3779B97F4A7C15>>32)%traceSample == 0 }

var (
	_ kgo.HookFetchRecordBuffered     = (*trace)(nil)
	_ kgo.HookFetchRecordUnbuffered   = (*trace)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*trace)(nil)
)

func (tr *trace) OnFetchRecordBuffered(r *kgo.Record) {
	if r.Topic != tr.in {
		return
	}
	if k, ok := traceKey(r); ok {
		now := time.Now()
		tr.mu.Lock()
		if _, ok := tr.fetched[k]; !ok {
			tr.fetched[k] = now
			if r.Attrs.TimestampType() == 1 {
				tr.appended[k] = r.Timestamp
			}
		}
		tr.mu.Unlock()
	}
}

func (tr *trace) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if r.Topic != tr.in || !polled {
		return
	}
	if k, ok := traceKey(r); ok {
		now := time.Now()
		tr.mu.Lock()
		if _, ok := tr.polled[k]; !ok {
			tr.polled[k] = now
		}
		tr.mu.Unlock()
	}
}

func (tr *trace) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if r.Topic != tr.out || err != nil {
		return
	}
	if k, ok := traceKey(r); ok {
		now := time.Now()
		tr.mu.Lock()
		if now.After(tr.acked[k]) {
			tr.acked[k] = now
		}
		tr.mu.Unlock()
	}
}

// process notes that the input with this "t" header value was
// transformed.
func (tr *trace) process(t []byte, partition int32) {
	if k, ok := timeNanos(t); ok && traced(k) {
		now := time.Now()
		tr.mu.Lock()
		if _, ok := tr.processed[k]; !ok {
			tr.processed[k] = procEv{now, partition}
		}
		tr.mu.Unlock()
	}
}

func (tr *trace) see(k int64, at time.Time) {
	if !traced(k) {
		return
	}
	tr.mu.Lock()
	if _, ok := tr.seen[k]; !ok {
		tr.seen[k] = at
	}
	tr.mu.Unlock()
}

// logger returns a logger that records the task's "transaction committed"
// lines (kgo's own logging stays off: see traceOpts).
func (tr *trace) logger() *slog.Logger { return slog.New(traceHandler{tr}) }

// opts silence kgo's logger, which the runner otherwise points at its
// own logger at debug level, or count its lines (-trace-kgo).
func (tr *trace) opts() []kgo.Opt {
	if tr.kgo != nil {
		return []kgo.Opt{kgo.WithLogger(tr.kgo), kgo.WithHooks(tr)}
	}
	return []kgo.Opt{kgo.WithLogger(kgo.BasicLogger(io.Discard, kgo.LogLevelNone, nil)), kgo.WithHooks(tr)}
}

type traceHandler struct{ tr *trace }

func (traceHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h traceHandler) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h traceHandler) WithGroup(string) slog.Handler          { return h }

func (h traceHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "transaction committed" {
		return nil
	}
	var (
		part                                   int64 = -1
		total, open, produce, offsets, opening time.Duration
	)
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "partition":
			part = a.Value.Int64()
		case "total":
			total = a.Value.Duration()
		case "open":
			open = a.Value.Duration()
		case "produce":
			produce = a.Value.Duration()
		case "offsets":
			offsets = a.Value.Duration()
		case "opening":
			opening = a.Value.Duration()
		}
		return true
	})
	if part < 0 || open == 0 {
		return nil
	}
	end := r.Time
	h.tr.mu.Lock()
	h.tr.commits[int32(part)] = append(h.tr.commits[int32(part)], commitEv{began: end.Add(-open), start: end.Add(-total), end: end, produce: produce, offsets: offsets, opening: opening})
	h.tr.mu.Unlock()
	return nil
}

// stage is one part of the latency, as p50/p99 over the traced inputs.
type stage struct {
	name     string
	p50, p99 time.Duration
}

// report splits the latency of every traced input counted from countFrom.
func (tr *trace) report(countFrom time.Time) (stages []stage, n int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var all []commitEv
	for p := range tr.commits {
		slices.SortFunc(tr.commits[p], func(a, b commitEv) int { return a.end.Compare(b.end) })
		all = append(all, tr.commits[p]...)
	}
	// lsoAt(t): the latest end of every transaction that began at or
	// before t (prefix maximum over transactions sorted by begin).
	sort.Slice(all, func(i, j int) bool { return all[i].began.Before(all[j].began) })
	prefix := make([]time.Time, len(all))
	for i, c := range all {
		prefix[i] = c.end
		if i > 0 && prefix[i-1].After(c.end) {
			prefix[i] = prefix[i-1]
		}
	}
	lsoAt := func(t time.Time) time.Time {
		i := sort.Search(len(all), func(i int) bool { return all[i].began.After(t) })
		if i == 0 {
			return time.Time{}
		}
		return prefix[i-1]
	}
	// With the broker's append time of every input (a LogAppendTime
	// topic; kfake keeps the producer's time), the first stage is split
	// into the produce and the fetch (millisecond timestamps).
	split := len(tr.appended) > 0
	names := []string{
		"input produced -> buffered by the consumer",
		"  of which produced -> appended by the broker",
		"  of which appended -> buffered by the consumer",
		"buffered -> handed out by the poll",
		"handed out -> transformed (worker queue)",
		"transformed -> outputs acknowledged",
		"transformed -> commit began (interval wait)",
		"commit began -> EndTxn returned",
		"EndTxn returned -> seen by the reader",
		"  of which other tasks' open transactions (LSO)",
		"  of which the rest (markers, reader fetch)",
		"total",
	}
	parts := make([][]time.Duration, len(names))
	for k, seen := range tr.seen {
		in := time.Unix(0, k)
		if in.Before(countFrom) {
			continue
		}
		f, ok1 := tr.fetched[k]
		pl, ok2 := tr.polled[k]
		pr, ok3 := tr.processed[k]
		ack, ok4 := tr.acked[k]
		ap, ok5 := tr.appended[k]
		if !ok1 || !ok2 || !ok3 || !ok4 || (split && !ok5) {
			continue
		}
		cs := tr.commits[pr.partition]
		i := sort.Search(len(cs), func(i int) bool { return !cs[i].end.Before(ack) })
		if i == len(cs) {
			continue
		}
		c := cs[i]
		lso := lsoAt(pr.at)
		if lso.Before(c.end) {
			lso = c.end
		}
		if lso.After(seen) {
			lso = seen
		}
		n++
		for j, d := range []time.Duration{f.Sub(in), ap.Sub(in), f.Sub(ap), pl.Sub(f), pr.at.Sub(pl), ack.Sub(pr.at), c.start.Sub(pr.at),
			c.end.Sub(c.start), seen.Sub(c.end), lso.Sub(c.end), seen.Sub(lso), seen.Sub(in)} {
			parts[j] = append(parts[j], d)
		}
	}
	if n == 0 {
		return nil, 0
	}
	for j, name := range names {
		if !split && (j == 1 || j == 2) {
			continue
		}
		stages = append(stages, stage{name, pct(parts[j], 0.5), pct(parts[j], 0.99)})
	}
	return stages, n
}

// commitsReport says how many commits the tasks made and how long their
// End took, and how often no transaction of any task was open.
func (tr *trace) commitsReport(from, to time.Time) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var ends, produce, offsets, opening []time.Duration
	var iv [][2]time.Time
	for _, cs := range tr.commits {
		for _, c := range cs {
			if c.end.Before(from) || c.began.After(to) {
				continue
			}
			ends = append(ends, c.end.Sub(c.start))
			produce, offsets = append(produce, c.produce), append(offsets, c.offsets)
			opening = append(opening, c.opening)
			iv = append(iv, [2]time.Time{c.began, c.end})
		}
	}
	if len(ends) == 0 {
		return ""
	}
	open := union(iv, from, to)
	return fmt.Sprintf("%d commits (%.1f/s), End p50 %v p99 %v (its flush p50 %v p99 %v, then its offsets p50 %v p99 %v); some transaction open %.1f%% of the time\n"+
		"    opening a transaction (AddOffsetsToTxn, which waits for the markers of the task's previous one) p50 %v p99 %v",
		len(ends), float64(len(ends))/to.Sub(from).Seconds(), round(pct(ends, 0.5)), round(pct(ends, 0.99)),
		round(pct(produce, 0.5)), round(pct(produce, 0.99)), round(pct(offsets, 0.5)), round(pct(offsets, 0.99)),
		100*open.Seconds()/to.Sub(from).Seconds(), round(pct(opening, 0.5)), round(pct(opening, 0.99)))
}

// kgoCounter is a kgo.Logger (debug level, -trace-kgo) that counts what
// the runner's clients log: the message, and for produce responses every
// partition that is retried, with its error.
type kgoCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (*kgoCounter) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (k *kgoCounter) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	keys := []string{level.String() + " " + msg}
	for i := 0; i+1 < len(keyvals); i += 2 {
		switch keyvals[i] {
		case "err":
			keys[0] += fmt.Sprintf(" (err %v)", keyvals[i+1])
		case "request":
			keys[0] += fmt.Sprintf(" %v", keyvals[i+1])
		case "response_error":
			if keyvals[i+1] != nil {
				keys[0] += fmt.Sprintf(" (response error %v)", keyvals[i+1])
			}
		}
		if s, ok := keyvals[i+1].(string); ok && keyvals[i] == "to" {
			for _, part := range strings.Split(s, "retrying@")[1:] {
				if a, b := strings.Index(part, "("), strings.Index(part, ")"); a >= 0 && b > a {
					keys = append(keys, "produce partition retried: "+part[a+1:b])
				}
			}
		}
	}
	k.mu.Lock()
	for _, key := range keys {
		k.n[key]++
	}
	k.mu.Unlock()
}

func (k *kgoCounter) report() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	type kv struct {
		k string
		n int
	}
	var all []kv
	for key, n := range k.n {
		if strings.HasPrefix(key, "DEBUG produced") || strings.Contains(key, "wrote ") || strings.Contains(key, "read ") {
			continue
		}
		all = append(all, kv{key, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	var b strings.Builder
	for i, x := range all {
		if i == 25 {
			break
		}
		msg := x.k
		if len(msg) > 150 {
			msg = msg[:150]
		}
		fmt.Fprintf(&b, "      %7d  %s\n", x.n, msg)
	}
	return b.String()
}
