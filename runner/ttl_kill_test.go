package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// ttlKillTTL is the event-time TTL of ttlKillStage.
const ttlKillTTL = 2 * time.Second

// ttlKillStage counts per key and emits the count; StateTTL expires a
// key not written for ttlKillTTL of event time, emitting
// "expired|<count>". A record of value "flush" only moves stream time.
func ttlKillStage(out string) *transformer.Stage[int] {
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		if string(rec.Value) == "flush" {
			return nil
		}
		n++
		e.SetState(n)
		e.Send(out, rec.Key, []byte(strconv.Itoa(n)))
		return nil
	}, transformer.StateTTL(ttlKillTTL, transformer.EventTime),
		transformer.OnExpire(func(_ context.Context, key []byte, n int, o *transformer.Outputs) error {
			o.Send(out, key, fmt.Appendf(nil, "expired|%d", n))
			return nil
		}))
}

// TestStateTTLChaosKill: runner processes of a counter with an event-time
// StateTTL are SIGKILLed at random moments while records keep coming:
// "keep" keys get a record every 10ms, so their expiry hints keep coming
// due and moving on; "idle" keys stop after the first half second and
// expire mid-run. Replacements restart warm or on another machine (a full
// restore of the states, their stamps and the timers). A final record an
// hour ahead expires every key. A read_committed reader then sees, per
// key, its counts without gap or repeat and one expiry with the last
// count; a keep key expires only at the end (unless the producer paused
// longer than the TTL), an idle key once, mid-run.
func TestStateTTLChaosKill(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("ttl-kill")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	dir := t.TempDir()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer pcl.Close()

	var (
		mu       sync.Mutex
		produced = map[string]int{}
		maxGap   time.Duration
		stop     = make(chan struct{})
		done     = make(chan struct{})
	)
	began := time.Now()
	go func() {
		defer close(done)
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			now := time.Now()
			var recs []*kgo.Record
			add := func(k string, p int32) {
				recs = append(recs, &kgo.Record{Topic: in, Partition: p, Key: []byte(k), Value: []byte("v"), Timestamp: now})
			}
			for i := range 10 {
				add(fmt.Sprintf("keep-%d", i), int32(i%2))
				if now.Sub(began) < 500*time.Millisecond {
					add(fmt.Sprintf("idle-%d", i), int32(i%2))
				}
			}
			if err := pcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			mu.Lock()
			for _, r := range recs {
				produced[string(r.Key)]++
			}
			maxGap = max(maxGap, now.Sub(last))
			mu.Unlock()
			last = now
		}
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 27))
	for i, id := range []string{"ttl-a", "ttl-b", "ttl-a"} { // warm, on another machine, warm again
		p := spawnTimersChild(t, c, dir, app, in, out, 0, id)
		kafkatest.WaitFor(t, 60*time.Second, "the child restored its tasks", func() bool {
			return strings.Count(p.logs(), `msg="task restored"`) >= 2*2 // 2 tasks, 2 stores each (state, timers)
		})
		time.Sleep(time.Duration(800+rng.IntN(1500)) * time.Millisecond)
		p.kill(t)
		t.Logf("kill %d of child %s", i+1, id)
	}
	spawnTimersChild(t, c, dir, app, in, out, 0, "ttl-b")
	time.Sleep(time.Second)
	close(stop)
	<-done
	require.NoError(t, pcl.ProduceSync(context.Background(),
		&kgo.Record{Topic: in, Partition: 0, Key: []byte("flush"), Value: []byte("flush"), Timestamp: time.Now().Add(time.Hour)},
		&kgo.Record{Topic: in, Partition: 1, Key: []byte("flush"), Value: []byte("flush"), Timestamp: time.Now().Add(time.Hour)},
	).FirstErr())
	mu.Lock()
	defer mu.Unlock()
	want := 0
	for _, n := range produced {
		want += n + 1 // its counts and its last expiry
	}
	var outs []*kgo.Record
	kafkatest.WaitFor(t, 120*time.Second, "every key expired", func() bool {
		outs = c.ReadCommitted(t, out)
		return len(outs) >= want
	})
	time.Sleep(500 * time.Millisecond) // nothing more comes
	outs = c.ReadCommitted(t, out)

	byKey := map[string][]string{}
	for _, o := range outs {
		byKey[string(o.Key)] = append(byKey[string(o.Key)], string(o.Value))
	}
	require.Len(t, byKey, len(produced))
	for k, n := range produced {
		got := byKey[k]
		// Segments of counts 1..m, each closed by "expired|m".
		count, records, expiries := 0, 0, 0
		for i, v := range got {
			if m, ok := strings.CutPrefix(v, "expired|"); ok {
				require.Equal(t, strconv.Itoa(count), m, "key %s, output %d: an expiry carries the last count", k, i)
				require.Positive(t, count, "key %s, output %d: an expiry follows a count", k, i)
				count = 0
				expiries++
				continue
			}
			count++
			records++
			require.Equal(t, strconv.Itoa(count), v, "key %s, output %d: counts without gap or repeat", k, i)
		}
		require.Zero(t, count, "key %s: its last output is its expiry", k)
		require.Equal(t, n, records, "key %s: every record counted once", k)
		if strings.HasPrefix(k, "idle-") || maxGap < ttlKillTTL {
			require.Equal(t, 1, expiries, "key %s expired once (producer's largest pause %v)", k, maxGap)
		}
	}
	t.Logf("%d keys, %d outputs; producer's largest pause %v", len(produced), len(outs), maxGap)
}
