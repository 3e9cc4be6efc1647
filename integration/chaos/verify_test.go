package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/store"
)

// output is the value of every output record (see ./sequencer).
type output struct {
	Key string `json:"key"`
	N   int64  `json:"n"`
	Seq int64  `json:"seq"`
}

// tally checks the outputs of inputs 0..total-1 as they are read.
type tally struct {
	h     *harness
	total int
	seen  []uint8   // per n: how many outputs carry it (saturating)
	seqs  [][]uint8 // per key index, per seq: how many outputs carry it
	last  []int64   // per key index: the last seq read (offset order)
	recs  int

	malformed, badKey, badSeq, misplaced, disorder int
	examples                                       []string
}

func newTally(h *harness, total int) *tally {
	tl := &tally{h: h, total: total, seen: make([]uint8, total),
		seqs: make([][]uint8, h.cfg.keys), last: make([]int64, h.cfg.keys)}
	for k := range h.cfg.keys {
		tl.seqs[k] = make([]uint8, h.count(k, total)+1)
	}
	return tl
}

func (tl *tally) example(format string, args ...any) {
	if len(tl.examples) < 10 {
		tl.examples = append(tl.examples, fmt.Sprintf(format, args...))
	}
}

func inc(b *uint8) {
	if *b < 255 {
		*b++
	}
}

// add checks one output record.
func (tl *tally) add(r *kgo.Record) {
	tl.recs++
	var o output
	if err := json.Unmarshal(r.Value, &o); err != nil {
		tl.malformed++
		tl.example("malformed output at %d@%d: %q", r.Partition, r.Offset, r.Value)
		return
	}
	keys := int64(tl.h.cfg.keys)
	if o.N < 0 || o.N >= int64(tl.total) || o.Key != string(r.Key) || o.Key != tl.h.key(int(o.N)) {
		tl.badKey++
		tl.example("output %+v at %d@%d has record key %q", o, r.Partition, r.Offset, r.Key)
		return
	}
	inc(&tl.seen[o.N])
	k := int(o.N % keys)
	seqs := tl.seqs[k]
	if o.Seq < 1 || o.Seq >= int64(len(seqs)) {
		tl.badSeq++
		tl.example("output %+v at %d@%d: seq out of 1..%d", o, r.Partition, r.Offset, len(seqs)-1)
		return
	}
	inc(&seqs[o.Seq])
	// The seq-th input of key k is n = k + (seq-1)*keys.
	if want := int64(k) + (o.Seq-1)*keys; o.N != want {
		tl.misplaced++
		tl.example("output %+v at %d@%d: seq %d belongs to n=%d", o, r.Partition, r.Offset, o.Seq, want)
	}
	if o.Seq <= tl.last[k] {
		tl.disorder++
		tl.example("output %+v at %d@%d follows seq %d of the same key", o, r.Partition, r.Offset, tl.last[k])
	}
	tl.last[k] = o.Seq
}

// duplicates is the number of outputs beyond the first per input; gaps the
// number of inputs without an output.
func (tl *tally) duplicates() (dups, gaps int) {
	for n, c := range tl.seen {
		switch {
		case c == 0:
			gaps++
			if gaps <= 3 {
				tl.example("input n=%d (key %s) has no output", n, tl.h.key(n))
			}
		case c > 1:
			dups += int(c) - 1
			if dups <= 3 {
				tl.example("input n=%d (key %s) has %d outputs", n, tl.h.key(n), c)
			}
		}
	}
	return dups, gaps
}

// seqExact reports whether every key's outputs carry seq 1..count exactly
// once, each for the right input, in offset order.
func (tl *tally) seqExact() bool {
	ok := tl.malformed == 0 && tl.badKey == 0 && tl.badSeq == 0 && tl.misplaced == 0 && tl.disorder == 0
	for k, seqs := range tl.seqs {
		for s := 1; s < len(seqs); s++ {
			if seqs[s] != 1 {
				if ok {
					tl.example("key k%d: seq %d appears %d times", k, s, seqs[s])
				}
				ok = false
			}
		}
	}
	return ok
}

// readCommitted reads topic with read_committed isolation from from (the
// log start where absent) up to its last stable offsets, calling fn for
// every record. It returns the offsets it read up to.
func (h *harness) readCommitted(ctx context.Context, topic string, from map[int32]int64, fn func(*kgo.Record)) (map[int32]int64, error) {
	lso, err := h.listOffsets(ctx, h.c.Adm.ListCommittedOffsets, topic)
	if err != nil {
		return nil, fmt.Errorf("last stable offsets of %s: %w", topic, err)
	}
	starts, err := h.listOffsets(ctx, h.c.Adm.ListStartOffsets, topic)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	for p, end := range lso {
		at := max(starts[p], from[p])
		if end > at {
			want[p] = end
			offsets[p] = kgo.NewOffset().At(at)
		}
	}
	if len(want) == 0 {
		return lso, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.c.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s: still waiting for partitions (partition: end) %v: %w", topic, want, ctx.Err())
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetching %s/%d: %w", t, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok {
				return
			}
			if r.Offset < end && !r.Attrs.IsControl() {
				fn(r)
			}
			// At or past end-1: the end is reached (the records before
			// it may be aborted ones the reader drops; see
			// kafkatest.Cluster.ReadCommitted).
			if r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
	}
	return lso, nil
}

// verify checks the run's end state; the processes have stopped.
func (h *harness) verify(want map[int32]int64) result {
	t := h.t
	cfg := h.cfg
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(cfg.records/2000)*time.Second)
	defer cancel()
	var res result
	problem := func(format string, args ...any) {
		res.problems = append(res.problems, fmt.Sprintf(format, args...))
	}

	// The input holds exactly what was produced, and the group committed
	// all of it (invariant 3: never ahead, never behind).
	if ends, err := h.listOffsets(ctx, h.c.Adm.ListEndOffsets, h.in); err != nil {
		problem("input end offsets: %v", err)
	} else if !equalOffsets(ends, want) {
		problem("input end offsets %v, produced %v", ends, want)
	}
	var (
		got map[int32]int64
		ok  bool
	)
	for try := 0; try < 20 && !ok; try++ { // the coordinator may be loading
		if got, ok = h.groupOffsets(ctx); !ok {
			sleep(ctx, 250*time.Millisecond)
		}
	}
	res.offsetsExact = ok && equalOffsets(got, want) && len(got) == len(want)
	if !res.offsetsExact {
		problem("committed offsets %v, input end offsets %v", got, want)
	}
	h.openTransactions(ctx, &res)

	// Every input exactly once; every key's seq exactly 1..count.
	tl := newTally(h, cfg.records)
	outEnds, err := h.readCommitted(ctx, h.out, nil, tl.add)
	if err != nil {
		problem("reading the output: %v", err)
	}
	res.duplicates, res.gaps = tl.duplicates()
	res.seqExact = tl.seqExact()
	t.Logf("chaos: read %d committed outputs for %d inputs: duplicates=%d gaps=%d malformed=%d bad_key=%d bad_seq=%d misplaced=%d disorder=%d",
		tl.recs, cfg.records, res.duplicates, res.gaps, tl.malformed, tl.badKey, tl.badSeq, tl.misplaced, tl.disorder)
	for _, e := range tl.examples {
		t.Logf("chaos:   %s", e)
	}

	if cfg.processor == "sequencer" && err == nil {
		res.stateChecked = true
		restored := h.checkRestore(ctx, &res)
		probed := h.probe(ctx, outEnds, &res)
		res.stateExact = restored && probed
	}
	return res
}

// settleWait bounds how long verify waits for the last transactions'
// markers once every process stopped.
const settleWait = 30 * time.Second

// openTransactions waits, up to settleWait, until the last stable offset
// of every partition of the output and changelog reaches its high
// watermark: EndTxn returns before the markers are written, so the last
// commits of the stopped processes may still be settling, and a read up to
// the last stable offsets would miss them. It notes the partitions where
// the two stay apart: a transaction left open after every process stopped.
func (h *harness) openTransactions(ctx context.Context, res *result) {
	topics := []string{h.out}
	if h.cfg.processor == "sequencer" {
		topics = append(topics, h.changelog())
	}
	deadline := time.Now().Add(settleWait)
	for {
		var errs, open []string
		for _, topic := range topics {
			hwm, err1 := h.listOffsets(ctx, h.c.Adm.ListEndOffsets, topic)
			lso, err2 := h.listOffsets(ctx, h.c.Adm.ListCommittedOffsets, topic)
			if err1 != nil || err2 != nil {
				errs = append(errs, fmt.Sprintf("offsets of %s: %v %v", topic, err1, err2))
				continue
			}
			for p, e := range hwm {
				if lso[p] != e {
					open = append(open, fmt.Sprintf("%s/%d: transaction still open after all processes stopped (hwm %d, lso %d)", topic, p, e, lso[p]))
				}
			}
		}
		if len(errs) == 0 && len(open) == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			res.problems = append(res.problems, errs...)
			for _, o := range open {
				h.t.Logf("chaos: %s", o)
			}
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// checkRestore rebuilds every task's store from the changelog, as a new
// owner would, and compares each key's state with its input count.
func (h *harness) checkRestore(ctx context.Context, res *result) bool {
	t := h.t
	cfg := h.cfg
	found := make([]bool, cfg.keys)
	ok := true
	for p := range cfg.partitions {
		st, err := store.Open(ctx, filepath.Join(h.dir, "verify-restore", strconv.Itoa(int(p))), store.Options{})
		if err != nil {
			res.problems = append(res.problems, err.Error())
			return false
		}
		n, err := changelog.Restore(ctx, h.c.Adm, h.changelog(), p, st, kgo.SeedBrokers(h.c.Brokers...))
		if err != nil {
			st.Close()
			res.problems = append(res.problems, fmt.Sprintf("restoring changelog partition %d: %v", p, err))
			return false
		}
		err = st.Range(func(key, value []byte) bool {
			var k int
			if _, err := fmt.Sscanf(string(key), "k%d", &k); err != nil || k < 0 || k >= cfg.keys || h.partitionOf(k) != p {
				ok = false
				res.problems = append(res.problems, fmt.Sprintf("changelog partition %d holds unexpected key %q", p, key))
				return true
			}
			found[k] = true
			var count int64
			if err := json.Unmarshal(value, &count); err != nil {
				ok = false
				res.problems = append(res.problems, fmt.Sprintf("state of %s is not a JSON int: %q", key, value))
				return true
			}
			if want := h.count(k, cfg.records); count != int64(want) {
				ok = false
				res.problems = append(res.problems, fmt.Sprintf("restored state of %s is %d, want %d", key, count, want))
			}
			return true
		})
		if cerr := st.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			res.problems = append(res.problems, err.Error())
			return false
		}
		t.Logf("chaos: changelog partition %d: restored %d records", p, n)
	}
	for k, f := range found {
		if !f {
			ok = false
			res.problems = append(res.problems, fmt.Sprintf("no restored state for k%d", k))
		}
	}
	return ok
}

// probe feeds one more input per key to one fresh processor, which restores
// every task from the changelog: each key's output must carry seq
// count(key)+1.
func (h *harness) probe(ctx context.Context, outEnds map[int32]int64, res *result) bool {
	t := h.t
	cfg := h.cfg
	total := cfg.records + cfg.keys
	recs := make([]*kgo.Record, 0, cfg.keys)
	for n := cfg.records; n < total; n++ {
		recs = append(recs, h.record(n))
	}
	h.c.Produce(t, recs...)

	probeDir := filepath.Join(h.dir, "probe")
	f := newFleet(t, binary(t, cfg.processor), probeDir, func(slot, gen int) []string {
		return h.processorArgs(slot, gen) // slot 0: a wiped store, restored from scratch
	})
	if err := mkdir(probeDir); err != nil {
		res.problems = append(res.problems, err.Error())
		return false
	}
	began := time.Now()
	f.start(0)
	want := h.ends(total)
	var got map[int32]int64
	drained := false
	for deadline := time.Now().Add(2*time.Minute + 4*cfg.session); time.Now().Before(deadline) && ctx.Err() == nil; {
		var ok bool
		if got, ok = h.groupOffsets(ctx); ok && equalOffsets(got, want) {
			drained = true
			break
		}
		sleep(ctx, 100*time.Millisecond)
	}
	if bad := f.stop(30 * time.Second); len(bad) > 0 {
		t.Logf("chaos: probe did not stop cleanly:\n%s", strings.Join(bad, "\n"))
	}
	if !drained {
		res.problems = append(res.problems, fmt.Sprintf("probe processor did not consume the probes: committed %v, want %v\n%s", got, want, f.tails(20)))
		return false
	}
	t.Logf("chaos: probe processor restored and processed %d probes in %v", cfg.keys, time.Since(began).Round(time.Millisecond))
	// Its offsets are visible once their marker is written, which may be
	// before the markers of the output partitions (EndTxn returns before
	// any is written; a broker restarted just before, the leader of some
	// output partitions, takes them later): a read up to the last stable
	// offsets now would miss probe outputs that are committed.
	h.openTransactions(ctx, res)

	ok := true
	seen := make([]int, cfg.keys)
	_, err := h.readCommitted(ctx, h.out, outEnds, func(r *kgo.Record) {
		var o output
		if err := json.Unmarshal(r.Value, &o); err != nil || o.N < int64(cfg.records) || o.N >= int64(total) {
			ok = false
			res.problems = append(res.problems, fmt.Sprintf("probe phase: unexpected output %q", r.Value))
			return
		}
		k := int(o.N % int64(cfg.keys))
		seen[k]++
		if want := int64(h.count(k, cfg.records) + 1); o.Seq != want {
			ok = false
			res.problems = append(res.problems, fmt.Sprintf("probe of k%d: seq %d, want %d (state restored by a fresh processor is off by %d)", k, o.Seq, want, o.Seq-want))
		}
	})
	if err != nil {
		res.problems = append(res.problems, fmt.Sprintf("probe phase: reading output: %v", err))
		return false
	}
	for k, c := range seen {
		if c != 1 {
			ok = false
			res.problems = append(res.problems, fmt.Sprintf("probe of k%d: %d outputs, want 1", k, c))
		}
	}
	return ok
}
