package extractor_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// TestRevokedWhileFencing stops an instance while the broker still holds
// its token's fence (InitProducerID), and starts another. The stopping
// instance waits for its fence before it lets the token go: a fence cut
// short would still reach the broker after the new owner's, and fence the
// new owner. The new owner runs every config to its end, exactly once.
func TestRevokedWhileFencing(t *testing.T) {
	c, fc := kafkatest.Fake(t)
	cfgTopic, out, app := kafkatest.Name("cfg"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, cfgTopic, 1)
	c.CreateTopic(t, out, 1)
	const items = 100
	c.Produce(t, configRec(t, cfgTopic, 0, "k", items))

	// The first InitProducerID of token 0 is held at the broker until
	// released; the broker then handles it as usual.
	txnID := fencing.TransactionalID(app, 0)
	var inits atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	fc.ControlKey(kmsg.InitProducerID.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		fc.KeepControl()
		req := kreq.(*kmsg.InitProducerIDRequest)
		if req.TransactionalID == nil || *req.TransactionalID != txnID || inits.Add(1) != 1 {
			return nil, nil, false
		}
		fc.SleepControl(func() { <-release })
		return nil, nil, false
	})

	// One page of two items per poll: the new owner commits for a while.
	ex := extractor.New(pageFunc(out, 2, 1, nil))
	opts := func(name string) []runner.Opt {
		return []runner.Opt{runner.ApplicationID(app), runner.ConfigTopics(cfgTopic),
			runner.PollInterval(20 * time.Millisecond), runner.WithKafkaOpts(kgo.ClientID(name))}
	}
	instA := start(t, c, ex, opts("a")...)
	t.Cleanup(let) // before the instances stop
	kafkatest.WaitFor(t, 60*time.Second, "A's fence held", func() bool {
		require.False(t, instA.ended(), "A ended: %v", instA.err)
		return inits.Load() >= 1
	})

	instA.cancel()
	stopped := time.Now()
	instB := start(t, c, ex, opts("b")...)
	kafkatest.WaitFor(t, 60*time.Second, "B commits, or A waits 3s for its fence", func() bool {
		require.False(t, instB.ended(), "B ended: %v", instB.err)
		return countVisible(t, c, out) > 0 || !instA.ended() && time.Since(stopped) > 3*time.Second
	})
	let() // A's fence reaches the broker now
	require.NoError(t, instA.wait(t, 60*time.Second))
	kafkatest.WaitFor(t, 60*time.Second, "all items visible", func() bool {
		require.False(t, instB.ended(), "B ended: %v", instB.err)
		return countVisible(t, c, out) >= items
	})
	require.NoError(t, instB.stop(t))
	c.WaitSettled(t, out)
	requireExactlyOnce(t, c.ReadCommitted(t, out), map[string]int{"k": items})
}
