package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reqStats is a kgo hook recording every request the runner's clients
// (consumer, task producers, admin, restore) send: kind, start and end.
// Nothing in the runner is changed to observe it.
type reqStats struct {
	mu   sync.Mutex
	reqs []req
	on   bool
}

type req struct {
	key        int16
	start, end time.Time
}

var _ kgo.HookBrokerE2E = (*reqStats)(nil)

func (s *reqStats) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	end := time.Now()
	start := end.Add(-(e.WriteWait + e.DurationE2E()))
	s.mu.Lock()
	if s.on {
		s.reqs = append(s.reqs, req{key, start, end})
	}
	s.mu.Unlock()
}

// record starts (or stops) recording and returns what was recorded.
func (s *reqStats) record(on bool) []req {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = on
	out := s.reqs
	s.reqs = nil
	return out
}

// union returns the length of the union of the intervals, clipped to
// [from, to].
func union(iv [][2]time.Time, from, to time.Time) time.Duration {
	sort.Slice(iv, func(i, j int) bool { return iv[i][0].Before(iv[j][0]) })
	var total time.Duration
	var cur [2]time.Time
	have := false
	for _, x := range iv {
		if x[0].Before(from) {
			x[0] = from
		}
		if x[1].After(to) {
			x[1] = to
		}
		if !x[1].After(x[0]) {
			continue
		}
		if have && !x[0].After(cur[1]) {
			if x[1].After(cur[1]) {
				cur[1] = x[1]
			}
			continue
		}
		if have {
			total += cur[1].Sub(cur[0])
		}
		cur, have = x, true
	}
	if have {
		total += cur[1].Sub(cur[0])
	}
	return total
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(p * float64(len(ds)-1))
	return ds[i]
}

// printRequests prints, per request kind, how many the runner sent during
// [from, to], their latency, and the share of the wall time in which at
// least one of that kind was in flight ("busy"). Producer-side kinds are
// grouped at the end: the share of wall time the commit path waited on the
// broker.
func printRequests(w io.Writer, reqs []req, from, to time.Time, records int) {
	wall := to.Sub(from)
	byKey := map[int16][]req{}
	for _, r := range reqs {
		if r.end.After(from) && r.start.Before(to) {
			byKey[r.key] = append(byKey[r.key], r)
		}
	}
	keys := make([]int16, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b int16) int { return len(byKey[b]) - len(byKey[a]) })
	fmt.Fprintf(w, "    %-18s %8s %8s %9s %9s %9s %9s %7s %7s\n", "request", "count", "per s", "per 1k in", "mean", "p50", "p99", "busy", "concur")
	var txnPath [][2]time.Time
	for _, k := range keys {
		rs := byKey[k]
		ds := make([]time.Duration, len(rs))
		iv := make([][2]time.Time, len(rs))
		var sum time.Duration
		for i, r := range rs {
			ds[i] = r.end.Sub(r.start)
			sum += ds[i]
			iv[i] = [2]time.Time{r.start, r.end}
		}
		busy := union(slices.Clone(iv), from, to)
		switch kmsg.Key(k) {
		case kmsg.Produce, kmsg.EndTxn, kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit, kmsg.AddPartitionsToTxn:
			txnPath = append(txnPath, iv...)
		}
		concur := 0.0
		if busy > 0 {
			concur = float64(sum) / float64(busy)
		}
		fmt.Fprintf(w, "    %-18s %8d %8.1f %9.2f %9s %9s %9s %6.1f%% %7.2f\n", kmsg.NameForKey(k), len(rs),
			float64(len(rs))/wall.Seconds(), float64(len(rs))*1000/float64(max(records, 1)), round(sum/time.Duration(len(rs))),
			round(pct(ds, 0.5)), round(pct(ds, 0.99)), 100*busy.Seconds()/wall.Seconds(), concur)
	}
	if len(txnPath) > 0 {
		busy := union(txnPath, from, to)
		fmt.Fprintf(w, "    commit path (Produce, AddOffsetsToTxn, TxnOffsetCommit, EndTxn) in flight %.1f%% of the wall time;\n", 100*busy.Seconds()/wall.Seconds())
		fmt.Fprintf(w, "    the rest (%.1f%%) is poll, transform, store apply and client overhead with no commit request open\n", 100-100*busy.Seconds()/wall.Seconds())
	}
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
