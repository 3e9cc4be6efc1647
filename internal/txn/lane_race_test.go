package txn

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// TestLaneJoinersRaceOpening: joiners race the opening of each
// transaction (every round aborts, so each next Join opens a new
// producer) while a sealer seals at random moments: every joiner that got
// a transaction is in exactly that transaction's joined list.
func TestLaneJoinersRaceOpening(t *testing.T) {
	c := kafkatest.New(t)
	app, out := kafkatest.Name("app"), kafkatest.Name("out")
	c.CreateTopic(t, out, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lane := NewLane(func(ctx context.Context) (*Producer, error) {
		return OpenRouted(ctx, app+"-shared-race", time.Minute, Routing{}, kgo.SeedBrokers(c.Brokers...))
	}, app)
	defer lane.Close()

	const joiners, rounds = 6, 40
	var mu sync.Mutex
	got := map[string]*Txn{}
	done := map[string]chan struct{}{}
	for i := range joiners {
		done[fmt.Sprint(i)] = make(chan struct{}, 1)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range joiners {
		who := fmt.Sprint(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				time.Sleep(time.Duration(rand.Intn(3)) * time.Millisecond)
				x, err := lane.Join(ctx, who)
				if err != nil {
					panic(err)
				}
				mu.Lock()
				got[who] = x
				mu.Unlock()
				x.Send(&kgo.Record{Topic: out, Partition: 0, Value: []byte(who)})
				select {
				case <-done[who]:
				case <-stop:
					return
				}
			}
		}()
	}
	for r := 0; r < rounds; r++ {
		time.Sleep(time.Duration(rand.Intn(5)) * time.Millisecond)
		joined := lane.Seal()
		if len(joined) == 0 {
			r--
			continue
		}
		in := map[string]bool{}
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, w := range joined {
				if got[w.(string)] == nil {
					return false
				}
			}
			return true
		}, 10*time.Second, time.Millisecond)
		time.Sleep(5 * time.Millisecond) // a joiner outside the list would record by now
		mu.Lock()
		x0 := got[joined[0].(string)]
		for _, w := range joined {
			require.False(t, in[w.(string)], "joined twice: %v", w)
			in[w.(string)] = true
			require.Same(t, x0, got[w.(string)], "%v in the list of another transaction", w)
		}
		for w, x := range got {
			if x == x0 {
				require.True(t, in[w], "%s joined the sealed transaction but is not in its list", w)
			}
		}
		mu.Unlock()
		require.NoError(t, lane.Abort(ctx))
		mu.Lock()
		for _, w := range joined {
			delete(got, w.(string))
			done[w.(string)] <- struct{}{}
		}
		mu.Unlock()
	}
	close(stop)
	lane.Seal()
	_ = lane.Abort(ctx)
	wg.Wait()
}
