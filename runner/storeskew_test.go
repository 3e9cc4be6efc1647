package runner

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// TestWarmRestartRepairsStoresOutOfStep: a crash after a commit can leave
// a task's stores applied through different transactions (each applies
// on its own). Here the named store's and the timer store's directories
// are put back to what they held a transaction earlier than the default
// store's; the warm restart then brings each store to its changelog's
// end: every output counts the key's records in both stores alike, and
// the stream time is the committed one, not the stale store's.
func TestWarmRestartRepairsStoresOutOfStep(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("skew")
	c.CreateTopic(t, in, 1)
	c.CreateTopic(t, out, 1)
	dir := t.TempDir()
	seen := transformer.NewStore[int]("seen", nil)
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		m, _, err := seen.Get(e, rec.Key)
		if err != nil {
			return err
		}
		if err := seen.Put(e, rec.Key, m+1); err != nil {
			return err
		}
		e.SetState(n + 1)
		e.Send(out, rec.Key, fmt.Appendf(nil, "%d,%d,%d", n+1, m+1, e.StreamTime().UnixMilli()))
		return nil
	}, transformer.Stores(seen))
	run := func(from, ts int64) {
		r, err := NewTransformer(st, SeedBrokers(c.Brokers...), ApplicationID(app), InputTopics(in),
			StateDir(dir), CommitInterval(50*time.Millisecond))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		defer func() {
			cancel()
			require.NoError(t, <-done)
		}()
		var recs []*kgo.Record
		for i := range int64(10) {
			recs = append(recs, &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "k%d", i%5), Value: []byte("x"), Timestamp: time.UnixMilli(ts + i)})
		}
		c.Produce(t, recs...)
		kafkatest.WaitFor(t, 30*time.Second, fmt.Sprintf("offset %d committed", from+10), func() bool {
			return c.CommittedOffsets(t, app, in)[0] == from+10
		})
	}
	stale := []string{store.NamedDir(dir, app, 0, "seen"), store.NamedDir(dir, app, 0, changelog.TimersName)}

	run(0, 1000)
	for _, d := range stale {
		require.NoError(t, os.CopyFS(d+".old", os.DirFS(d)))
	}
	run(10, 5000)
	for _, d := range stale {
		require.NoError(t, os.RemoveAll(d))
		require.NoError(t, os.Rename(d+".old", d))
	}
	run(20, 3000) // timestamps behind the committed stream time (5009)

	recs := c.ReadCommitted(t, out)
	require.Len(t, recs, 30)
	count := map[string]int{}
	for i, r := range recs {
		f := strings.Split(string(r.Value), ",")
		require.Equal(t, f[0], f[1], "output %d (%s): the default and the named store disagree", i, r.Value)
		count[string(r.Key)]++
		require.Equal(t, fmt.Sprint(count[string(r.Key)]), f[0], "output %d of %s (%s)", i, r.Key, r.Value)
		if i >= 20 {
			require.Equal(t, "5009", f[2], "output %d (%s): stream time", i, r.Value)
		}
	}
}
