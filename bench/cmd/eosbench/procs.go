package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// maxPoll is the records per poll of every loop: the runner's default
// MaxPollRecords.
const maxPoll = 500

// job is what a processor is given: its input and output topic, its group
// (the runner's application id) and started, to call when it handles its
// first record (the drain timer starts there).
type job struct {
	env     *env
	in, out string
	group   string
	started func()
	// trace, when set, follows sampled inputs through the runner (runner
	// rows only).
	trace *trace
}

// processor runs until ctx is canceled (returns nil) or fails.
type processor struct {
	label string
	run   func(ctx context.Context, j job) error
	// traced: the latency row traces one input in traceSample (see trace).
	traced bool
	// copartitioned: the latency row places every input on the partition
	// the default partitioner picks for its key (keyOfCopartitioned), not
	// on key % partitions, so each task writes one output partition.
	copartitioned bool
}

// outputs returns the two output values of the count n of a key.
func outputs(n int) (v1, v2 []byte) {
	return strconv.AppendInt([]byte("count="), int64(n), 10), strconv.AppendInt([]byte("double="), 2*int64(n), 10)
}

func pollErr(fs kgo.Fetches) error {
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if ferr == nil {
			ferr = fmt.Errorf("fetching %s/%d: %w", t, p, err)
		}
	})
	return ferr
}

// plainPipe is row (a): a group consumer reading uncommitted, counting per
// key in memory and producing two outputs per input, pipelined the way a
// plain at-least-once pipe is written: Produce is asynchronous, the loop
// polls again at once, and a committer goroutine commits the offsets of
// every poll whose outputs (and those of every earlier poll) the broker
// acknowledged, coalescing whatever was acknowledged while its previous
// commit was in flight. An offset is never committed before its outputs
// are acknowledged. No transactions, no changelog: the limit.
func plainPipe() processor {
	return processor{label: "(a) plain consume→produce pipe, no transactions", run: func(ctx context.Context, j job) error {
		cl, err := plainClient(j)
		if err != nil {
			return err
		}
		defer cl.Close()
		c := newAckCommitter()
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.run(cctx, cl) }()
		defer func() { cancel(); <-done }()
		counts := map[string]int{}
		for {
			fs := cl.PollRecords(ctx, maxPoll)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return nil
			}
			if err := pollErr(fs); err != nil {
				return err
			}
			if err := c.err(); err != nil {
				return fmt.Errorf("plain pipe: %w", err)
			}
			recs := fs.Records()
			if len(recs) == 0 {
				continue
			}
			j.started()
			pl := c.add(fs, 2*len(recs))
			for _, r := range recs {
				n := counts[string(r.Key)] + 1
				counts[string(r.Key)] = n
				v1, v2 := outputs(n)
				cl.Produce(ctx, &kgo.Record{Topic: j.out, Key: r.Key, Value: v1, Headers: r.Headers}, pl.acked)
				cl.Produce(ctx, &kgo.Record{Topic: j.out, Key: r.Key, Value: v2, Headers: r.Headers}, pl.acked)
			}
		}
	}}
}

func plainClient(j job) (*kgo.Client, error) {
	return kgo.NewClient(
		kgo.SeedBrokers(j.env.brokers...),
		kgo.ConsumerGroup(j.group),
		kgo.ConsumeTopics(j.in),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	)
}

// ackCommitter commits the offsets of polls in poll order once all their
// outputs are acknowledged (see plainPipe).
type ackCommitter struct {
	mu     sync.Mutex
	polls  []*ackPoll // in poll order, not yet committed
	failed error
	signal chan struct{}
}

// ackPoll is one poll: its outputs not acknowledged yet and the next
// offsets of its partitions.
type ackPoll struct {
	c       *ackCommitter
	pending int
	offsets map[string]map[int32]kgo.EpochOffset
}

func newAckCommitter() *ackCommitter { return &ackCommitter{signal: make(chan struct{}, 1)} }

// add registers a poll of fs that sends outputs records.
func (c *ackCommitter) add(fs kgo.Fetches, outputs int) *ackPoll {
	pl := &ackPoll{c: c, pending: outputs, offsets: map[string]map[int32]kgo.EpochOffset{}}
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		last := p.Records[len(p.Records)-1]
		if pl.offsets[p.Topic] == nil {
			pl.offsets[p.Topic] = map[int32]kgo.EpochOffset{}
		}
		pl.offsets[p.Topic][p.Partition] = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
	})
	c.mu.Lock()
	c.polls = append(c.polls, pl)
	c.mu.Unlock()
	if outputs == 0 {
		c.wake()
	}
	return pl
}

// acked is the promise of every output of the poll.
func (pl *ackPoll) acked(_ *kgo.Record, err error) {
	c := pl.c
	c.mu.Lock()
	pl.pending--
	if err != nil && c.failed == nil {
		c.failed = fmt.Errorf("produce: %w", err)
	}
	last := pl.pending == 0
	c.mu.Unlock()
	if last {
		c.wake()
	}
}

func (c *ackCommitter) wake() {
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

func (c *ackCommitter) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// ready removes the leading polls whose outputs are all acknowledged and
// returns their offsets merged (nil: none); none after a failed produce.
func (c *ackCommitter) ready() map[string]map[int32]kgo.EpochOffset {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return nil
	}
	var merged map[string]map[int32]kgo.EpochOffset
	for len(c.polls) > 0 && c.polls[0].pending == 0 {
		if merged == nil {
			merged = map[string]map[int32]kgo.EpochOffset{}
		}
		for t, ps := range c.polls[0].offsets {
			if merged[t] == nil {
				merged[t] = map[int32]kgo.EpochOffset{}
			}
			for p, o := range ps {
				merged[t][p] = o
			}
		}
		c.polls = c.polls[1:]
	}
	return merged
}

// run commits what is ready, one commit at a time, until ctx ends.
func (c *ackCommitter) run(ctx context.Context, cl *kgo.Client) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.signal:
		}
		offsets := c.ready()
		if offsets == nil {
			continue
		}
		if err := commitOffsets(ctx, cl, offsets); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.mu.Lock()
			if c.failed == nil {
				c.failed = fmt.Errorf("commit: %w", err)
			}
			c.mu.Unlock()
			return err
		}
	}
}

// syncLoop is the extra row (a-sync): the plain loop of row (a), but it
// waits for every poll's outputs (ProduceSync) and then for its offsets
// (CommitOffsetsSync) before it polls again.
func syncLoop() processor {
	return processor{label: "(a-sync) plain loop, waits for produce+commit each poll", run: func(ctx context.Context, j job) error {
		cl, err := plainClient(j)
		if err != nil {
			return err
		}
		defer cl.Close()
		counts := map[string]int{}
		for {
			fs := cl.PollRecords(ctx, maxPoll)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return nil
			}
			if err := pollErr(fs); err != nil {
				return err
			}
			recs := fs.Records()
			if len(recs) == 0 {
				continue
			}
			j.started()
			outs := make([]*kgo.Record, 0, 2*len(recs))
			for _, r := range recs {
				n := counts[string(r.Key)] + 1
				counts[string(r.Key)] = n
				v1, v2 := outputs(n)
				outs = append(outs,
					&kgo.Record{Topic: j.out, Key: r.Key, Value: v1, Headers: r.Headers},
					&kgo.Record{Topic: j.out, Key: r.Key, Value: v2, Headers: r.Headers})
			}
			if err := cl.ProduceSync(ctx, outs...).FirstErr(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("sync loop: produce: %w", err)
			}
			if err := commitOffsets(ctx, cl, cl.UncommittedOffsets()); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("sync loop: commit: %w", err)
			}
		}
	}}
}

// commitOffsets commits offsets and waits for the answer.
func commitOffsets(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) error {
	var cerr error
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				cerr = errors.Join(cerr, kerr.ErrorForCode(p.ErrorCode))
			}
		}
	})
	return cerr
}

// changelogPartitioner sends changelog records to their explicit partition
// and hashes every other record's key (murmur2), like the runner.
type changelogPartitioner struct{ changelog string }

func (p changelogPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.changelog {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return kgo.StickyKeyPartitioner(nil).ForTopic(topic)
}

// sessionLoop is row (b): what a Go user writes instead of using the
// runner. One kgo.GroupTransactSession (one transactional id) polls 500
// records, keeps the per-key counts in memory, and in one transaction per
// poll produces two outputs per input, one changelog record per key the
// poll touched (last write wins) to the compacted changelog partition of
// the input partition, and the poll's offsets. Produce is asynchronous; End
// flushes and commits.
func sessionLoop(stats *reqStats) processor {
	return processor{label: "(b) GroupTransactSession loop, changelog in the txn", run: func(ctx context.Context, j job) error {
		changelog := j.group + "-changelog"
		ends, err := j.env.endOffsets(ctx, j.in)
		if err != nil {
			return err
		}
		if err := j.env.createTopic(ctx, changelog, int32(len(ends)), true); err != nil {
			return err
		}
		opts := []kgo.Opt{
			kgo.SeedBrokers(j.env.brokers...),
			kgo.TransactionalID(j.group + "-txn"),
			kgo.TransactionTimeout(60 * time.Second),
			kgo.ConsumerGroup(j.group),
			kgo.ConsumeTopics(j.in),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.RequireStableFetchOffsets(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.RecordPartitioner(changelogPartitioner{changelog}),
		}
		if stats != nil {
			opts = append(opts, kgo.WithHooks(stats))
		}
		sess, err := kgo.NewGroupTransactSession(opts...)
		if err != nil {
			return err
		}
		defer sess.Close()
		type touched struct {
			partition int32
			n         int
		}
		counts := map[string]int{}
		for {
			fs := sess.PollRecords(ctx, maxPoll)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return nil
			}
			if err := pollErr(fs); err != nil {
				return err
			}
			recs := fs.Records()
			if len(recs) == 0 {
				continue
			}
			j.started()
			if err := sess.Begin(); err != nil {
				return fmt.Errorf("session loop: begin: %w", err)
			}
			var (
				mu   sync.Mutex
				perr error
			)
			promise := func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					perr = errors.Join(perr, err)
					mu.Unlock()
				}
			}
			dirty := map[string]touched{}
			for _, r := range recs {
				n := counts[string(r.Key)] + 1
				counts[string(r.Key)] = n
				dirty[string(r.Key)] = touched{r.Partition, n}
				v1, v2 := outputs(n)
				sess.Produce(ctx, &kgo.Record{Topic: j.out, Key: r.Key, Value: v1, Headers: r.Headers}, promise)
				sess.Produce(ctx, &kgo.Record{Topic: j.out, Key: r.Key, Value: v2, Headers: r.Headers}, promise)
			}
			for k, t := range dirty {
				sess.Produce(ctx, &kgo.Record{Topic: changelog, Partition: t.partition, Key: []byte(k), Value: strconv.AppendInt(nil, int64(t.n), 10)}, promise)
			}
			action := kgo.TryCommit
			committed, err := sess.End(context.WithoutCancel(ctx), action)
			mu.Lock()
			err = errors.Join(err, perr)
			mu.Unlock()
			if err != nil {
				return fmt.Errorf("session loop: end transaction: %w", err)
			}
			if !committed {
				// The in-memory counts now hold an aborted poll; a real
				// application rolls them back. The benchmark expects none.
				return errors.New("session loop: transaction aborted (rebalance?); counts are no longer exact")
			}
		}
	}}
}

// commitInterval returns the runner option that sets the commit interval.
func commitInterval(d time.Duration) (runner.TransformerOpt, error) {
	return runner.CommitInterval(d), nil
}

// runnerProc is row (c): runner.Run over a stateful per-key counter
// (transformer.New, state int, JSON codec) that sends two outputs per
// input, with the given options on top of the defaults. hooks observe every
// client the runner creates (see reqStats).
func runnerProc(label string, stats *reqStats, opts ...runner.TransformerOpt) processor {
	return processor{label: label, traced: true, run: func(ctx context.Context, j job) error {
		dir, err := os.MkdirTemp("", "eosbench-state-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		counter := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
			j.started()
			if j.trace != nil {
				for _, h := range rec.Headers {
					if h.Key == timeHeader {
						j.trace.process(h.Value, rec.Partition)
					}
				}
			}
			n++
			e.SetState(n)
			v1, v2 := outputs(n)
			e.SendRecord(transformer.Output{Topic: j.out, Key: rec.Key, Value: v1, Headers: rec.Headers})
			e.SendRecord(transformer.Output{Topic: j.out, Key: rec.Key, Value: v2, Headers: rec.Headers})
			return nil
		})
		all := append([]runner.TransformerOpt{
			runner.SeedBrokers(j.env.brokers...),
			runner.ApplicationID(j.group),
			runner.InputTopics(j.in),
			runner.StateDir(dir),
		}, opts...)
		if stats != nil {
			all = append(all, runner.WithKafkaOpts(kgo.WithHooks(stats)))
		}
		if j.trace != nil {
			all = append(all, runner.WithLogger(j.trace.logger()), runner.WithKafkaOpts(j.trace.opts()...))
		}
		r, err := runner.NewTransformer(counter, all...)
		if err != nil {
			return err
		}
		return r.Run(ctx)
	}}
}
