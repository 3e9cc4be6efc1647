package txn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
)

// handover is one transactional ID's topics: outputs (keyed) and a
// changelog written at an explicit partition, as a task writes them.
type handover struct {
	c               *kafkatest.Cluster
	id, group       string
	in, out, clog   string
	inID            [16]byte
	committed, sent int
	member          *kafkatest.Member
}

func newHandover(t *testing.T) *handover {
	c := kafkatest.New(t)
	h := &handover{c: c, id: kafkatest.Name("app") + "-0", group: kafkatest.Name("app"),
		in: kafkatest.Name("in"), out: kafkatest.Name("out"), clog: kafkatest.Name("changelog")}
	c.CreateTopic(t, h.in, 1)
	c.CreateTopic(t, h.out, 2)
	c.CreateTopic(t, h.clog, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	td, err := c.Adm.ListTopics(ctx, h.in)
	require.NoError(t, err)
	h.inID = td[h.in].ID
	h.member = c.JoinGroup(t, h.group, h.in)
	return h
}

func (h *handover) open(t *testing.T) *Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Open(ctx, h.id, time.Minute, h.clog, kgo.SeedBrokers(h.c.Brokers...))
	require.NoError(t, err)
	return p
}

// records returns n outputs and 3 changelog writes, numbered from h.sent.
func (h *handover) records(n int) []*kgo.Record {
	var recs []*kgo.Record
	for range n {
		v := strconv.Itoa(h.sent)
		h.sent++
		recs = append(recs, &kgo.Record{Topic: h.out, Key: []byte("k" + v), Value: []byte(v)})
	}
	for k := range 3 {
		recs = append(recs, &kgo.Record{Topic: h.clog, Partition: 0, Key: []byte("s" + strconv.Itoa(k)), Value: []byte(strconv.Itoa(h.sent))})
	}
	return recs
}

func (h *handover) offsets() *Offsets {
	return &Offsets{Group: h.group, Next: Of(0, map[string]int64{h.in: int64(h.sent)}),
		TopicIDs: map[string][16]byte{h.in: h.inID}, Member: h.member.Identity}
}

// commit runs one transaction the way a task does: it opens with the
// offsets partition, sends the outputs, then the changelog writes, and
// ends with the offsets.
func (h *handover) commit(ctx context.Context, p *Producer, outputs int) error {
	x, err := p.Begin(ctx)
	if err != nil {
		return err
	}
	if err := x.AddOffsets(ctx, h.group); err != nil {
		return errors.Join(err, x.Abort(ctx))
	}
	for _, r := range h.records(outputs) {
		x.Send(r)
	}
	_, err = x.End(ctx, h.offsets())
	return err
}

// TestHandOversKeepSequences hands one transactional ID over between
// producers many times, each committing and aborting transactions of
// outputs and changelog writes as a task does: no produce is refused, and
// a read_committed reader sees exactly the committed transactions.
func TestHandOversKeepSequences(t *testing.T) {
	h := newHandover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want := 0
	for round := range 40 {
		p := h.open(t)
		for i := range 5 {
			if (round+i)%4 == 3 {
				x, err := p.Begin(ctx)
				require.NoError(t, err)
				require.NoError(t, x.AddOffsets(ctx, h.group))
				for _, r := range h.records(3) {
					x.Send(r)
				}
				require.NoError(t, x.Abort(ctx), "round %d transaction %d: abort", round, i)
				continue
			}
			require.NoError(t, h.commit(ctx, p, 1+i), "round %d transaction %d", round, i)
			want += 1 + i
		}
		p.Close()
	}
	h.c.WaitSettled(t, h.out) // the last commit's markers
	require.Len(t, h.c.ReadCommitted(t, h.out), want)
}

// TestFencedProducerSeesFence lets a producer go on with its transaction
// after the next owner opened the transactional ID: its produce and its
// end fail as fenced (never as a sequence error), it begins no other
// transaction, its late abort does not disturb the new owner, and nothing
// of its transaction becomes visible.
func TestFencedProducerSeesFence(t *testing.T) {
	h := newHandover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want := 0
	for round := range 20 {
		old := h.open(t)
		require.NoError(t, h.commit(ctx, old, 2), "round %d: the old owner's first commit", round)
		want += 2
		x, err := old.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, x.AddOffsets(ctx, h.group))
		recs := h.records(2)
		for _, r := range recs[:2] {
			x.Send(r)
		}
		require.NoError(t, old.cl.Flush(ctx))

		next := h.open(t) // the fence
		for _, r := range recs[2:] {
			x.Send(r)
		}
		_, err = x.End(ctx, h.offsets())
		require.Error(t, err, "round %d: the fenced owner committed", round)
		require.True(t, errors.Is(err, fencing.ErrFenced), "round %d: the fenced owner's end: %v", round, err)
		// Its abort may have been answered with the new owner's epoch:
		// it must not write again.
		_, err = old.Begin(ctx)
		require.True(t, errors.Is(err, fencing.ErrFenced), "round %d: the fenced owner began again: %v", round, err)
		old.Close()

		for i := range 3 {
			require.NoError(t, h.commit(ctx, next, 1), "round %d: the new owner's commit %d", round, i)
			want++
		}
		next.Close()
	}
	h.c.WaitSettled(t, h.out) // the last commit's markers
	got := h.c.ReadCommitted(t, h.out)
	require.Len(t, got, want, fmt.Sprintf("outputs %v", kafkatest.Keys(got)))
}

// TestOpenKeepsFencingMetadataMinAge checks that a producer refreshes
// metadata for a retried partition at fencing.Init's minimum age whatever
// the caller asked: the producer's delivery options come after the
// caller's and win.
func TestOpenKeepsFencingMetadataMinAge(t *testing.T) {
	h := newHandover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Open(ctx, h.id, time.Minute, h.clog, kgo.SeedBrokers(h.c.Brokers...), kgo.MetadataMinAge(time.Second))
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, 20*time.Millisecond, p.cl.OptValue(kgo.MetadataMinAge))
}

// TestUnmovedProducersKeepSequences runs two transactional IDs without a
// pause while two others are handed over between producers again and
// again, all writing to the same output partitions and each to its own
// changelog partition, as the tasks of two processes do while one takes
// the other's tasks over: no transaction of any of them fails.
func TestUnmovedProducersKeepSequences(t *testing.T) {
	c := kafkatest.New(t)
	app := kafkatest.Name("app")
	in, out, clog := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("changelog")
	const partitions = 4
	c.CreateTopic(t, in, partitions)
	c.CreateTopic(t, out, partitions)
	c.CreateTopic(t, clog, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	td, err := c.Adm.ListTopics(ctx, in)
	require.NoError(t, err)
	inID := td[in].ID
	member := c.JoinGroup(t, app, in)

	open := func(n int32) (*Producer, error) {
		return Open(ctx, fencing.TransactionalID(app, n), time.Minute, clog, kgo.SeedBrokers(c.Brokers...))
	}
	// commit runs one transaction of task n: outputs in chunks, then its
	// changelog writes, then its offsets.
	commit := func(p *Producer, n int32, next int64) error {
		x, err := p.Begin(ctx)
		if err != nil {
			return err
		}
		if err := x.AddOffsets(ctx, app); err != nil {
			return errors.Join(err, x.Abort(ctx))
		}
		for i := range 30 {
			x.Send(&kgo.Record{Topic: out, Key: fmt.Appendf(nil, "p%d-k%d-%d", n, i%3, next), Value: []byte("v")})
		}
		for k := range 3 {
			x.Send(&kgo.Record{Topic: clog, Partition: n, Key: fmt.Appendf(nil, "p%d-k%d", n, k), Value: []byte(strconv.FormatInt(next, 10))})
		}
		_, err = x.End(ctx, &Offsets{Group: app, Next: Of(n, map[string]int64{in: next}), TopicIDs: map[string][16]byte{in: inID}, Member: member.Identity})
		return err
	}

	stop := make(chan struct{})
	errs := make(chan error, 2)
	for _, n := range []int32{2, 3} {
		go func() {
			p, err := open(n)
			if err != nil {
				errs <- err
				return
			}
			defer p.Close()
			for i := int64(1); ; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if err := commit(p, n, i); err != nil {
					errs <- fmt.Errorf("unmoved task %d, transaction %d: %w", n, i, err)
					return
				}
			}
		}()
	}
	var next int64
	for round := range 60 {
		for _, n := range []int32{0, 1} {
			p, err := open(n)
			require.NoError(t, err, "round %d: opening task %d", round, n)
			for range 2 {
				next++
				require.NoError(t, commit(p, n, next), "round %d: task %d", round, n)
			}
			p.Close()
		}
		select {
		case err := <-errs:
			require.NoError(t, err)
			t.Fatal("an unmoved task stopped")
		default:
		}
	}
	close(stop)
	for range 2 {
		require.NoError(t, <-errs)
	}
}
