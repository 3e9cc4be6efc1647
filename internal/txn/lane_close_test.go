package txn

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestLaneCloseDuringOpening: a Join that is opening the producer when
// the lane closes fails, and leaves no producer or transaction in the
// closed lane.
func TestLaneCloseDuringOpening(t *testing.T) {
	c := kafkatest.New(t)
	app := kafkatest.Name("app")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release := make(chan struct{})
	lane := NewLane(func(ctx context.Context) (*Producer, error) {
		<-release
		return OpenRouted(ctx, app+"-shared-close", time.Minute, Routing{}, kgo.SeedBrokers(c.Brokers...))
	}, app)
	joined := make(chan error, 1)
	go func() {
		_, err := lane.Join(ctx, "a")
		joined <- err
	}()
	time.Sleep(50 * time.Millisecond) // Join is opening
	lane.Close()
	close(release)
	err := <-joined
	lane.mu.Lock()
	leaked := lane.p
	lane.mu.Unlock()
	if leaked != nil {
		defer leaked.Close()
	}
	require.Error(t, err, "a Join that outlives Close must not succeed")
	require.Nil(t, leaked, "the closed lane holds an open producer")
}
