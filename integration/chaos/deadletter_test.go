package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestDeadLetterExactlyOnceUnderSIGKILL runs the sequencer with a
// dead-letter topic over input where every 7th value is poison (not a
// number), SIGKILLs it repeatedly while batches holding poison records are
// in flight, and checks with a read_committed reader that every poison
// record is in the dead-letter topic exactly once, as it was read and with
// the KIP-1034 headers naming its topic, partition and offset, and every
// good record exactly once in the output, with each key's seq exact.
func TestDeadLetterExactlyOnceUnderSIGKILL(t *testing.T) {
	for _, mode := range []string{"per-task", "shared"} {
		t.Run("mode="+mode, func(t *testing.T) { testDeadLetterUnderSIGKILL(t, mode == "shared") })
	}
}

func testDeadLetterUnderSIGKILL(t *testing.T, shared bool) {
	const (
		records    = 6000
		keys       = 12
		partitions = 3
		kills      = 4
	)
	c := kafkatest.New(t)
	in, out, dlq, app := kafkatest.Name("dl-in"), kafkatest.Name("dl-out"), kafkatest.Name("dl-dlq"), kafkatest.Name("dl-app")
	for _, tp := range []string{in, out, dlq} {
		c.CreateTopic(t, tp, partitions)
	}
	poison := func(n int) bool { return n%7 == 3 }
	recs := make([]*kgo.Record, records)
	for n := range records {
		v := strconv.Itoa(n)
		if poison(n) {
			v = "poison-" + v
		}
		recs[n] = &kgo.Record{
			Topic: in, Partition: int32(n%keys) % partitions,
			Key: []byte("k" + strconv.Itoa(n%keys)), Value: []byte(v),
			Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(strconv.Itoa(n))}},
		}
	}
	c.Produce(t, recs...) // sets each record's offset

	dir := t.TempDir()
	f := newFleet(t, binary(t, "sequencer"), dir, func(slot, gen int) []string {
		args := []string{
			"-brokers", strings.Join(c.Brokers, ","), "-app", app, "-in", in, "-out", out,
			"-dead-letter", dlq, "-state-dir", filepath.Join(dir, "state"),
			"-session-timeout", "3s", "-max-poll", "50", "-work", "4ms",
		}
		if shared {
			args = append(args, "-shared-producer")
		}
		return args
	})
	ends := c.EndOffsets(t, in)
	drained := func() bool {
		got := c.CommittedOffsets(t, app, in)
		for p, end := range ends {
			if got[p] != end {
				return false
			}
		}
		return true
	}
	committed := func() (sum int64) {
		for _, o := range c.CommittedOffsets(t, app, in) {
			sum += o
		}
		return sum
	}
	// On a timeout: the group, offsets and transactions, and the
	// processes' logs (a wait of this test failed once in CI).
	state := func() string {
		return fmt.Sprintf("committed %v, ends %v\n%s%s", c.CommittedOffsets(t, app, in), ends, c.Describe(app, in), f.tails(40))
	}
	// alone reports whether the group is stable with p as its only
	// member: the members of the generations killed before are gone.
	alone := func(p *proc) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gs, err := c.Adm.DescribeGroups(ctx, app)
		if err != nil {
			return false
		}
		g := gs[app]
		return g.Err == nil && g.State == "Stable" && len(g.Members) == 1 && g.Members[0].ClientID == p.clientID
	}
	p := f.start(0)
	inFlight := 0
	for k := range kills {
		// Wait until this generation runs, then kill it mid-run: the
		// group is stable with it as its only member, and it committed
		// since. A kill must not land while it joins: kfake can stall
		// a group whose member dies in a rebalance (see settle in
		// faults_test.go). A commit alone does not tell: the
		// last commit of the generation killed before can land after
		// the committed offsets were read and before its kill.
		// A generation may drain the rest before it is killed (the input
		// is finite): then there is nothing left to kill it in.
		began := time.Now()
		kafkatest.WaitForState(t, 60*time.Second, fmt.Sprintf("generation %d alone in the stable group before kill %d", p.gen, k), func() bool {
			return alone(p) || drained()
		}, state)
		from := committed()
		kafkatest.WaitForState(t, 60*time.Second, fmt.Sprintf("a commit of generation %d before kill %d", p.gen, k), func() bool {
			return committed() > from || drained()
		}, state)
		t.Logf("deadletter: generation %d alone in the group and committed %v after it started", p.gen, time.Since(began).Round(time.Millisecond))
		if drained() {
			t.Logf("deadletter: input drained after %d kills", k)
			break
		}
		time.Sleep(time.Duration(100+100*k) * time.Millisecond)
		if drained() {
			t.Logf("deadletter: input drained after %d kills", k)
			break
		}
		inFlight++ // killed while input was left: poison records in flight
		require.True(t, f.kill(p, func() {}), "kill %d: the processor was no longer running:\n%s", k, f.tails(10))
		p = f.current(0)
	}
	require.Positive(t, inFlight, "no kill landed before the input was drained")
	deadline := time.Now().Add(120 * time.Second)
	for !drained() {
		if time.Now().After(deadline) {
			t.Fatalf("lag not 0 within 120s of the last kill; the state then:\n%s", state())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, b := range f.stop(30 * time.Second) {
		t.Logf("deadletter: not a clean stop (not what this test checks): %s\n%s", b, f.tails(5))
	}
	for _, e := range f.unexpectedExits() {
		// Restarted like an orchestrator would (on kfake a rejoin can
		// time out); exactly-once must hold anyway.
		t.Logf("deadletter: slot %d gen %d exited by itself: %v", e.slot, e.gen, e.err)
	}
	// The last transactions' markers may not be written yet (EndTxn
	// returns before them), and a process that did not stop cleanly may
	// have left one open: fence every task's transactional ID (a commit
	// under way completes, an open transaction aborts) and wait for the
	// markers, so what is read below is what a next owner resumes from.
	c.FenceTasks(t, app, partitions)
	c.WaitSettled(t, out)
	c.WaitSettled(t, dlq)

	// Every good record exactly once in the output, seq exact per key.
	seen := map[int64]int{}
	seqs := map[string][]int64{}
	for _, r := range c.ReadCommitted(t, out) {
		var o struct {
			Key string `json:"key"`
			N   int64  `json:"n"`
			Seq int64  `json:"seq"`
		}
		require.NoError(t, json.Unmarshal(r.Value, &o))
		seen[o.N]++
		seqs[o.Key] = append(seqs[o.Key], o.Seq)
	}
	goodPerKey := map[string]int64{}
	for n := range records {
		if poison(n) {
			require.Zero(t, seen[int64(n)], "poison record %d in the output", n)
			continue
		}
		require.Equal(t, 1, seen[int64(n)], "good record %d in the output", n)
		goodPerKey["k"+strconv.Itoa(n%keys)]++
	}
	for k, ss := range seqs {
		for i, s := range ss {
			require.Equal(t, int64(i+1), s, "seq of key %s", k)
		}
		require.Len(t, ss, int(goodPerKey[k]), "outputs of key %s", k)
	}

	// Every poison record exactly once in the dead-letter topic, as read,
	// with headers naming where it came from and why.
	dead := map[int]int{}
	for _, r := range c.ReadCommitted(t, dlq) {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		n, err := strconv.Atoi(h["n"])
		require.NoError(t, err, "original header n kept: %v", h)
		require.True(t, poison(n), "good record %d in the dead-letter topic", n)
		src := recs[n]
		dead[n]++
		require.Equal(t, src.Key, r.Key)
		require.Equal(t, src.Value, r.Value)
		require.Equal(t, in, h["__streams.errors.topic"])
		require.Equal(t, strconv.Itoa(int(src.Partition)), h["__streams.errors.partition"])
		require.Equal(t, strconv.FormatInt(src.Offset, 10), h["__streams.errors.offset"])
		require.Contains(t, h["__streams.errors.message"], "not a number")
		require.Contains(t, h["__streams.errors.message"], fmt.Sprintf("topic %s partition %d offset %d", in, src.Partition, src.Offset))
		require.NotEmpty(t, h["__streams.errors.exception"])
		require.Contains(t, h["__streams.errors.stacktrace"], "invalid syntax")
		require.Equal(t, "value", h["__flechtwerk.errors.part"])
	}
	for n := range records {
		if poison(n) {
			require.Equal(t, 1, dead[n], "poison record %d in the dead-letter topic", n)
		}
	}
	t.Logf("deadletter: broker=%s records=%d poison=%d kills=%d in_flight_kills=%d", c.Kind(), records, len(dead), inFlight, inFlight)
}
