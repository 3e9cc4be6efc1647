package txn

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/group"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/internal/restore"
)

// TestSharedZombieAfterRebalance: an instance's shared transaction holds
// an output, a changelog write and, in one case, its offsets, when the
// instance freezes and its partition moves to a new member (a new
// generation). Nothing fences the frozen instance's transactional ID.
//
//   - offsets sent before the rebalance: the new owner's require-stable
//     offset fetch waits for the transaction, which the woken zombie
//     commits; the new owner then sees the zombie's offsets, and its
//     changelog partition settles with the zombie's write in it: offsets
//     and state agree.
//   - offsets not sent: the new owner reads the old offsets at once; the
//     woken zombie's offsets are refused for its stale generation, its
//     transaction aborts, and neither its output nor its write is ever
//     visible.
func TestSharedZombieAfterRebalance(t *testing.T) {
	for _, sent := range []bool{true, false} {
		name := "offsets=not_sent"
		if sent {
			name = "offsets=sent"
		}
		t.Run(name, func(t *testing.T) {
			c := kafkatest.New(t)
			app := kafkatest.Name("app")
			in, out, clog := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("changelog")
			for _, topic := range []string{in, out, clog} {
				c.CreateTopic(t, topic, 1)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			td, err := c.Adm.ListTopics(ctx, in)
			require.NoError(t, err)
			zombie := c.JoinGroup(t, app, in)

			lane := NewLane(func(ctx context.Context) (*Producer, error) {
				return Open(ctx, app+"-shared-zombie", time.Minute, clog, kgo.SeedBrokers(c.Brokers...))
			}, app)
			defer lane.Close()
			x, err := lane.Join(ctx, "task 0")
			require.NoError(t, err)
			x.Send(&kgo.Record{Topic: out, Key: []byte("z"), Value: []byte("zombie")})
			x.Send(&kgo.Record{Topic: clog, Partition: 0, Key: []byte("k"), Value: []byte("zombie")})
			require.NoError(t, x.p.cl.Flush(ctx))
			offs := &Offsets{Group: app, Next: Of(0, map[string]int64{in: 5}), TopicIDs: map[string][16]byte{in: td[in].ID}, Member: zombie.Identity}
			if sent {
				require.NoError(t, x.p.sendOffsets(ctx, offs, true))
			}
			// Frozen here. Its partition moves: the member is gone, a new
			// one holds a newer generation.
			_, oldGen := zombie.Identity()
			zombieID, _ := zombie.Identity()
			frozen := func() (string, int32) { return zombieID, oldGen }
			zombie.Leave()
			owner := c.JoinGroup(t, app, in)
			_, gen := owner.Identity()
			require.Greater(t, gen, oldGen)

			type fetched struct {
				offs map[string]int64
				err  error
			}
			got := make(chan fetched, 1)
			go func() {
				o, err := group.FetchTaskCommitted(ctx, owner.Client(), slog.New(slog.DiscardHandler), app, []string{in}, 0)
				got <- fetched{o, err}
			}()
			if sent {
				select {
				case f := <-got:
					t.Fatalf("the new owner read offsets %v (%v) while the zombie's sent offsets were pending", f.offs, f.err)
				case <-time.After(500 * time.Millisecond):
				}
				// The zombie wakes and ends its transaction: the offsets
				// were accepted before the rebalance, the end commits.
				require.NoError(t, x.p.cl.EndTransaction(ctx, kgo.TryCommit))
				f := <-got
				require.NoError(t, f.err)
				require.Equal(t, map[string]int64{in: 5}, f.offs, "the zombie's offsets")
			} else {
				f := <-got
				require.NoError(t, f.err)
				require.Equal(t, map[string]int64{in: -1}, f.offs, "no commit")
				offs.Member = frozen
				ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := x.End(ectx, offs)
				ecancel()
				require.Error(t, err, "the stale generation's offsets are refused")
			}
			// The new owner restores once its changelog partition settled.
			require.NoError(t, restore.Settle(ctx, c.Adm, clog, 0))
			lso, err := c.Adm.ListCommittedOffsets(ctx, clog)
			require.NoError(t, err)
			hwm, err := c.Adm.ListEndOffsets(ctx, clog)
			require.NoError(t, err)
			l, _ := lso.Lookup(clog, 0)
			h, _ := hwm.Lookup(clog, 0)
			require.Equal(t, h.Offset, l.Offset, "nothing open on the changelog partition")
			var state, outputs []string
			for _, r := range c.ReadCommitted(t, clog) {
				state = append(state, string(r.Value))
			}
			c.WaitSettled(t, out)
			for _, r := range c.ReadCommitted(t, out) {
				outputs = append(outputs, string(r.Value))
			}
			if sent {
				require.Equal(t, []string{"zombie"}, state, "the committed offsets' state write")
				require.Equal(t, []string{"zombie"}, outputs)
			} else {
				require.Empty(t, state, "an aborted zombie's write")
				require.Empty(t, outputs)
			}
		})
	}
}
