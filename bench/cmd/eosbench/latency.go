package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/store"
)

type latResult struct {
	offered       float64
	sent          int
	samples       int
	p50, p99, max time.Duration
	reqs          []req
	from, to      time.Time
	stages        []stage
	traced        int
	commits       string
	// worst are the windows of produce time with the highest latency.
	worst string
	// CPU cores used while the paced producer ran: this process, the
	// broker (-1: unknown), every process of the machine (-1: unknown).
	self, broker, machine float64
}

// window is the span of produce time the latency rows report the worst
// of: a stall of the processor or the broker shows as a run of windows
// whose latency is far above the p50, where the p99 alone cannot tell one
// stall from a slow steady state.
const window = 250 * time.Millisecond

// latencyRun starts p on fresh topics, waits until it committed one
// warm-up record per partition, then offers rate records/s for
// c.latencyDur from a paced producer. Every input carries its produce time
// (header "t"), which the processors copy to both outputs; a read_committed
// consumer of the output topic takes latency = time it received the output
// − that time. Inputs of the first second are not counted.
func latencyRun(ctx context.Context, e *env, c config, p processor, rate float64, record bool, stats *reqStats) (*latResult, error) {
	parts := int32(c.partitions)
	place := keyOf
	if p.copartitioned {
		place = keyOfCopartitioned
	}
	in, out, group := e.name("lat-in"), e.name("lat-out"), e.name("lat-group")
	// The broker stamps every input when it appends it (LogAppendTime), so
	// the trace can split "input produced -> buffered by the consumer" into
	// the produce and the fetch.
	appendTime := "LogAppendTime"
	if err := e.createTopicWith(ctx, in, parts, map[string]*string{"message.timestamp.type": &appendTime}); err != nil {
		return nil, err
	}
	if err := e.createTopic(ctx, out, parts, false); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	var tr *trace
	if p.traced {
		tr = newTrace(in, out)
		if *traceKgo {
			tr.kgo = &kgoCounter{n: map[string]int{}}
		}
	}
	go func() {
		errc <- p.run(pctx, job{env: e, in: in, out: out, group: group, started: func() {}, trace: tr})
	}()

	// Warm-up: group join, fencing, restore are not measured.
	warm, err := e.producer()
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	// One warm-up record per partition (keys until every partition has one).
	for k := 0; len(ends) < int(parts); k++ {
		if k == c.keys {
			return nil, fmt.Errorf("%d keys do not cover %d partitions", c.keys, parts)
		}
		key, pt := place(k, c.keys, parts)
		if _, ok := ends[pt]; ok {
			continue
		}
		ends[pt] = 1
		if err := warm.ProduceSync(ctx, &kgo.Record{Topic: in, Partition: pt, Key: key, Value: []byte("warm-up"),
			Headers: []kgo.RecordHeader{{Key: timeHeader, Value: timeValue(time.Now())}}}).FirstErr(); err != nil {
			warm.Close()
			return nil, err
		}
	}
	warm.Close()
	if err := e.waitCommitted(ctx, group, in, ends, errc, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	paceStart := time.Now().Add(200 * time.Millisecond)
	countFrom := paceStart.Add(c.latencyWarm)
	cons, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...),
		kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(time.Second))
	if err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		seen  int
		lats  []time.Duration
		wmax  []time.Duration // max latency per window of produce time
		cdone = make(chan struct{})
	)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		defer close(cdone)
		for cctx.Err() == nil {
			fs := cons.PollFetches(cctx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				t, ok := headerTime(r)
				if !ok || t.Before(paceStart) {
					return // warm-up
				}
				seen++
				if !t.Before(countFrom) {
					l := now.Sub(t)
					lats = append(lats, l)
					i := int(t.Sub(paceStart) / window)
					for len(wmax) <= i {
						wmax = append(wmax, 0)
					}
					wmax[i] = max(wmax[i], l)
				}
				if tr != nil {
					tr.see(t.UnixNano(), now)
				}
			})
			mu.Unlock()
		}
	}()

	prod, err := e.producer(kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	var (
		perrMu sync.Mutex
		perr   error
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			perrMu.Lock()
			perr = errors.Join(perr, err)
			perrMu.Unlock()
		}
	}
	time.Sleep(time.Until(paceStart))
	if record && stats != nil {
		stats.record(true)
	}
	var profF *os.File
	if record && c.latencyProfile != "" {
		if profF, err = os.Create(c.latencyProfile); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(profF); err != nil {
			profF.Close()
			return nil, fmt.Errorf("cpu profile %s: %w", c.latencyProfile, err)
		}
	}
	c0 := e.cpuNow()
	sent := 0
	for {
		el := time.Since(paceStart)
		if el >= c.latencyDur {
			break
		}
		for want := int(rate * el.Seconds()); sent < want; sent++ {
			key, pt := place(sent, c.keys, parts)
			prod.Produce(ctx, &kgo.Record{Topic: in, Partition: pt, Key: key, Value: strconv.AppendInt(nil, int64(sent), 10),
				Headers: []kgo.RecordHeader{{Key: timeHeader, Value: timeValue(time.Now())}}}, promise)
		}
		time.Sleep(time.Millisecond)
	}
	paceEnd := time.Now()
	c1 := e.cpuNow()
	if profF != nil {
		pprof.StopCPUProfile()
		if err := profF.Close(); err != nil {
			return nil, fmt.Errorf("cpu profile %s: %w", c.latencyProfile, err)
		}
	}
	if err := prod.Flush(ctx); err != nil {
		return nil, err
	}
	if perr != nil {
		return nil, fmt.Errorf("paced producer: %w", perr)
	}
	res := &latResult{sent: sent, offered: float64(sent) / paceEnd.Sub(paceStart).Seconds(), from: paceStart, to: paceEnd}
	res.self, res.broker = cores(c0, c1)
	res.machine = machineCores(c0, c1)
	if record && stats != nil {
		res.reqs = stats.record(false)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		n := seen
		mu.Unlock()
		if n >= 2*sent {
			break
		}
		select {
		case err := <-errc:
			return nil, fmt.Errorf("processor ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d outputs seen 2m after the paced producer stopped", n, 2*sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ccancel()
	<-cdone
	cons.Close()
	cancel()
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("processor ended with: %w", err)
	}
	if len(lats) == 0 {
		return nil, errors.New("no latency samples")
	}
	res.samples = len(lats)
	res.p50, res.p99, res.max = pct(lats, 0.5), pct(lats, 0.99), pct(lats, 1)
	res.worst = worstWindows(wmax, res.p99)
	if tr != nil {
		res.stages, res.traced = tr.report(countFrom)
		res.commits = tr.commitsReport(countFrom, paceEnd)
		if tr.kgo != nil {
			res.commits += "\n    what the runner's clients logged (-trace-kgo), most frequent first:\n" + tr.kgo.report()
		}
	}
	return res, nil
}

type restoreResult struct {
	records                int
	plain, restore         time.Duration
	plainRate, restoreRate float64
}

// restoreBench writes n records with distinct keys and 100-byte values to
// one partition of a compacted topic, then times a plain read_committed
// read of the partition and a changelog.Restore of it into a fresh store.
func restoreBench(ctx context.Context, e *env, n int) (*restoreResult, error) {
	topic := e.name("restore")
	if err := e.createTopic(ctx, topic, 1, true); err != nil {
		return nil, err
	}
	prod, err := e.producer(kgo.ProducerLinger(5 * time.Millisecond))
	if err != nil {
		return nil, err
	}
	value := make([]byte, 100)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	var (
		mu   sync.Mutex
		perr error
	)
	for i := range n {
		prod.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "key-%09d", i), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				perr = errors.Join(perr, err)
				mu.Unlock()
			}
		})
	}
	err = prod.Flush(ctx)
	prod.Close()
	if err = errors.Join(err, perr); err != nil {
		return nil, fmt.Errorf("producing %s: %w", topic, err)
	}
	logf("restore: wrote %d records to %s/0", n, topic)
	res := &restoreResult{records: n}

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			cl.Close()
			return nil, err
		}
		if err := pollErr(fs); err != nil {
			cl.Close()
			return nil, err
		}
		got += fs.NumRecords()
	}
	res.plain = time.Since(t0)
	cl.Close()

	dir, err := os.MkdirTemp("", "eosbench-restore-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(ctx, filepath.Join(dir, "0"), store.Options{})
	if err != nil {
		return nil, err
	}
	t0 = time.Now()
	applied, err := changelog.Restore(ctx, e.adm, topic, 0, st, kgo.SeedBrokers(e.brokers...))
	res.restore = time.Since(t0)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("restore of %s/0: %w", topic, err)
	}
	if applied != n {
		return nil, fmt.Errorf("restore of %s/0 applied %d records, want %d", topic, applied, n)
	}
	res.plainRate = float64(n) / res.plain.Seconds()
	res.restoreRate = float64(n) / res.restore.Seconds()
	logf("restore: plain read %.0f records/s, changelog.Restore %.0f records/s", res.plainRate, res.restoreRate)
	return res, nil
}

// worstWindows reports the windows whose highest latency exceeds the p99:
// how many, and the five worst with their start (produce time since the
// pace start) and their highest latency.
func worstWindows(wmax []time.Duration, p99 time.Duration) string {
	type w struct {
		at  time.Duration
		max time.Duration
	}
	var over []w
	for i, m := range wmax {
		if m > p99 {
			over = append(over, w{time.Duration(i) * window, m})
		}
	}
	if len(over) == 0 {
		return ""
	}
	slices.SortFunc(over, func(a, b w) int { return cmp.Compare(b.max, a.max) })
	s := fmt.Sprintf("%d of %d windows of %v (by produce time) hold a latency above the p99; the worst:", len(over), len(wmax), window)
	for _, o := range over[:min(5, len(over))] {
		s += fmt.Sprintf(" +%v %v,", o.at, o.max.Round(time.Millisecond))
	}
	return strings.TrimSuffix(s, ",")
}
