package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/engine/sink/acks"
	"github.com/flechtwerk/flechtwerk/internal/group"
	"github.com/flechtwerk/flechtwerk/internal/latch"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/internal/topics"
	"github.com/flechtwerk/flechtwerk/sink"
)

// Validate checks the delivery settings of c against the mode of snk (the
// sink reports a missing mode itself).
func Validate(c *config.Options, snk stage.Sink) error {
	switch snk.Delivery() {
	case stage.AtLeastOnce:
		return c.ValidateDelivery(true)
	case stage.AtMostOnce:
		return c.ValidateDelivery(false)
	}
	return nil
}

// Params is what a sink engine runs with. Cfg has been validated (with
// Validate) and has its logger and metrics.
type Params struct {
	Cfg  *config.Options
	Sink stage.Sink
	// Policy is the InvalidRecords policy of Cfg.
	Policy *batch.Policy
	// Ready, when set, is called once the start-up checks passed and the
	// consumer joins the group and fetches.
	Ready func()
}

// sinkRun is one Run of a sink.
type sinkRun struct {
	c        *config.Options
	snk      stage.Sink
	atLeast  bool
	adm      *kadm.Client
	tracker  *acks.Tracker // at-least-once only
	consumer *kgo.Client
	pol      *batch.Policy // the InvalidRecords policy
	dlq      *kgo.Client   // the dead-letter producer of batch.DeadLetter

	// fatal holds an error of a group callback that ends Run; the loop
	// reads it before each poll.
	fatal latch.Latch
}

// Run runs a sink: it checks the input topics and that the
// group's committed offsets can be fetched, joins the group and runs the
// poll-write-commit loop until ctx ends or an error does; then it commits
// what was written synchronously (at-least-once) and leaves the group.
func Run(ctx context.Context, p Params) error {
	c := p.Cfg
	base := c.ClientOpts()
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("runner: admin client: %w", err)
	}
	defer admCl.Close()
	sr := &sinkRun{
		c:       c,
		snk:     p.Sink,
		atLeast: p.Sink.Delivery() == stage.AtLeastOnce,
		adm:     kadm.NewClient(admCl),
		pol:     p.Policy,
	}
	// Sinks do not need equal partition counts: check each topic alone.
	for _, t := range c.InputTopics {
		if _, _, err := topics.Describe(ctx, sr.adm, "input", []string{t}); err != nil {
			return err
		}
	}
	if dl := c.DeadLetterTopic(); dl != "" {
		if _, _, err := topics.Describe(ctx, sr.adm, "dead-letter", []string{dl}); err != nil {
			return err
		}
		// A plain idempotent producer (franz-go's default: idempotent,
		// acks=all): the sink is at-least-once, so is its dead letter.
		if sr.dlq, err = kgo.NewClient(append(base, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))...); err != nil {
			return fmt.Errorf("runner: dead-letter producer: %w", err)
		}
		defer sr.dlq.Close()
	}
	// The committed offsets must be readable before anything is
	// consumed: never a silent fall back to the reset policy.
	if _, err := sr.committed(ctx, nil); err != nil {
		return err
	}
	if sr.atLeast {
		if sr.tracker, err = acks.New(acks.CommitKeepalive(c.CommitKeepalive)); err != nil {
			return err
		}
	}
	if sr.consumer, err = kgo.NewClient(sr.consumerOpts(base)...); err != nil {
		return fmt.Errorf("runner: consumer: %w", err)
	}
	defer c.Metrics.Attach(sinkSource{sr})()
	c.Logger.Info("sink starting", "group", c.Group(), "topics", c.InputTopics, "delivery", p.Sink.Delivery().String())
	if p.Ready != nil {
		p.Ready()
	}
	err = sr.loop(ctx)
	if sr.atLeast {
		sr.finalCommit()
	}
	sr.consumer.Close()
	return err
}

func (sr *sinkRun) consumerOpts(base []kgo.Opt) []kgo.Opt {
	c := sr.c
	delivery := []kgo.Opt{
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AdjustFetchOffsetsFn(sr.adjust),
	}
	if sr.atLeast {
		revoked := func(ctx context.Context, _ *kgo.Client, ps map[string][]int32) { sr.revoked(ctx, ps) }
		return group.Opts(base, c.ConsumerOpts, group.Member{
			Group:          c.Group(),
			Topics:         c.InputTopics,
			SessionTimeout: c.SessionTimeout,
			OnAssigned:     func(context.Context, *kgo.Client, map[string][]int32) {},
			OnRevoked:      revoked,
			Delivery: append(delivery,
				// Markers are returned so the watermark can pass them.
				kgo.KeepControlRecords(),
				// Revocation happens between poll cycles, after the
				// cycle's writes are done.
				kgo.BlockRebalanceOnPoll(),
			),
		})
	}
	// At-most-once: franz-go's own auto-commit on a timer, committing
	// everything polled, written or not (greedy; the default revoke
	// commits it as well).
	opts := slices.Concat(base, c.ConsumerOpts)
	opts = append(opts,
		kgo.ConsumerGroup(c.Group()),
		kgo.ConsumeTopics(c.InputTopics...),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.AutoCommitInterval(c.AutoCommitInterval),
		kgo.GreedyAutoCommit(),
		kgo.SessionTimeout(c.SessionTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, c.SessionTimeout/3)),
	)
	return append(opts, delivery...)
}

// committed fetches the group's committed offsets of the input topics
// (only the partitions in want, when it is not nil): -1 for a partition
// without a commit. Any failure is an *flechtwerk.OffsetFetchError.
func (sr *sinkRun) committed(ctx context.Context, want map[string][]int32) (map[string]map[int32]int64, error) {
	g := sr.c.Group()
	ts := sr.c.InputTopics
	if want != nil {
		ts = ts[:0:0]
		for t := range want {
			ts = append(ts, t)
		}
		sort.Strings(ts)
	}
	resps, err := sr.fetchOffsets(ctx, g, ts)
	noGroup := errors.Is(err, kerr.GroupIDNotFound)
	if noGroup {
		// A group that does not exist (yet) has no commits; some
		// coordinators answer so instead of -1 offsets.
		resps, err = kadm.OffsetResponses{}, nil
	}
	if err != nil {
		return nil, &flechtwerk.OffsetFetchError{Group: g, Err: err}
	}
	out := map[string]map[int32]int64{}
	for _, t := range ts {
		out[t] = map[int32]int64{}
	}
	var errs []error
	resps.Each(func(o kadm.OffsetResponse) {
		if want != nil && !slices.Contains(want[o.Topic], o.Partition) {
			return
		}
		if o.Err != nil {
			errs = append(errs, &flechtwerk.OffsetFetchError{Group: g, Topic: o.Topic, Partition: o.Partition, Err: o.Err})
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = max(o.At, -1)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for t, ps := range want {
		for _, p := range ps {
			if _, ok := out[t][p]; !ok && noGroup {
				out[t][p] = -1
			} else if !ok {
				return nil, &flechtwerk.OffsetFetchError{Group: g, Topic: t, Partition: p, Err: errors.New("missing from the coordinator's answer")}
			}
		}
	}
	return out, nil
}

// fetchOffsets fetches the group's committed offsets of ts, waiting out a
// coordinator that is not ready (see fetchCommitted).
func (sr *sinkRun) fetchOffsets(ctx context.Context, g string, ts []string) (kadm.OffsetResponses, error) {
	return group.FetchCommitted(ctx, sr.adm, sr.c.Logger, g, ts)
}

// adjust decides the start offsets of newly assigned partitions: explicit
// resume state (the sink's hook) > committed group offset > reset policy
// (what franz-go passes for a partition without a commit). The committed
// offset becomes the tracker's floor. A failure ends Run.
func (sr *sinkRun) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	want := map[string][]int32{}
	for t, ps := range offsets {
		for p := range ps {
			want[t] = append(want[t], p)
		}
		slices.Sort(want[t])
	}
	committed, err := sr.committed(ctx, want)
	if err != nil {
		if ctx.Err() != nil {
			// The session ended during the fetch (a rebalance or
			// Close): franz-go fetches again in the next session.
			return nil, err
		}
		sr.fatal.Set(err)
		return nil, err
	}
	log := sr.c.Logger
	for t, ps := range want {
		var resume map[int32]int64
		if sr.snk.HasResume() {
			if resume, err = sr.snk.Resume(ctx, t, ps); err != nil {
				err = fmt.Errorf("runner: the sink's resume hook for topic %s partitions %v: %w", t, ps, err)
				sr.fatal.Set(err)
				return nil, err
			}
		}
		for _, p := range ps {
			com := committed[t][p]
			if sr.atLeast {
				sr.tracker.Assign(acks.TopicPartition{Topic: t, Partition: p}, com)
			}
			at, ok := resume[p]
			switch {
			case ok && at >= 0:
				if com >= 0 && at < com {
					log.Warn("sink resume state lags the committed offset: replaying, the group offset is not rewound (is the resume store stale?)",
						"topic", t, "partition", p, "resume", at, "committed", com)
				}
				offsets[t][p] = kgo.NewOffset().At(at).WithEpoch(-1)
				log.Info("sink partition assigned", "topic", t, "partition", p, "start", at, "from", "resume state", "committed", com)
			case com >= 0:
				log.Info("sink partition assigned", "topic", t, "partition", p, "start", com, "from", "committed offset")
			default:
				log.Info("sink partition assigned", "topic", t, "partition", p, "from", "reset policy (earliest)")
			}
		}
	}
	return offsets, nil
}

// revoked commits the written offsets of revoked partitions synchronously
// before they move (at-least-once; the cycle's writes are done, see
// BlockRebalanceOnPoll).
func (sr *sinkRun) revoked(ctx context.Context, ps map[string][]int32) {
	var offs []acks.Offset
	for t, parts := range ps {
		for _, p := range parts {
			if o, ok := sr.tracker.Revoke(acks.TopicPartition{Topic: t, Partition: p}); ok {
				offs = append(offs, o)
			}
		}
	}
	if len(offs) > 0 {
		sr.commitSync(ctx, offs, "revoke")
	}
}

// pollTimeout bounds one poll so that idle partitions are kept alive.
func (sr *sinkRun) pollTimeout() time.Duration {
	return min(max(sr.c.CommitKeepalive/4, 10*time.Millisecond), 5*time.Second)
}

func (sr *sinkRun) loop(ctx context.Context) error {
	for {
		if err := sr.fatal.Err(); err != nil {
			sr.consumer.AllowRebalance()
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		pollCtx, cancel := context.WithTimeout(ctx, sr.pollTimeout())
		fetches := sr.consumer.PollRecords(pollCtx, sr.c.MaxPollRecords)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		if ferr := group.FirstFetchError(fetches); ferr != nil {
			sr.consumer.AllowRebalance()
			return ferr
		}
		err := sr.cycle(ctx, fetches)
		if sr.atLeast {
			// One asynchronous commit per poll cycle of every partition
			// whose watermark moved, and keepalives of idle ones.
			sr.commitAsync(ctx, append(sr.tracker.Changed(), sr.tracker.Keepalive()...))
		}
		sr.consumer.AllowRebalance()
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil
			}
			return err
		}
	}
}

// pending is one output to write with the ticket of its record.
type pending struct {
	out stage.Output
	tk  acks.Ticket
	off int64
}

// cycle registers, prepares and writes the records of one poll: one Write
// per partition, partitions in parallel (at most Concurrency at once).
func (sr *sinkRun) cycle(ctx context.Context, fetches kgo.Fetches) error {
	type part struct {
		tp   acks.TopicPartition
		outs []pending
	}
	var parts []*part
	var prepErr error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if prepErr != nil || len(fp.Records) == 0 {
			return
		}
		pt := &part{tp: acks.TopicPartition{Topic: fp.Topic, Partition: fp.Partition}}
		for _, rec := range fp.Records {
			if rec.Attrs.IsControl() {
				continue // a transaction marker: passed by Advance below
			}
			var tk acks.Ticket
			if sr.atLeast {
				var err error
				if tk, err = sr.tracker.Register(pt.tp, rec.Offset); err != nil {
					prepErr = fmt.Errorf("runner: sink commit tracker: %w", err)
					return
				}
			}
			outs, err := sr.prepare(ctx, rec)
			if err != nil {
				prepErr = err
				return
			}
			if sr.atLeast {
				// A record that produced nothing is released at once.
				if err := sr.tracker.FanOut(tk, len(outs)); err != nil {
					prepErr = fmt.Errorf("runner: sink commit tracker: %w", err)
					return
				}
			}
			for _, o := range outs {
				pt.outs = append(pt.outs, pending{out: o, tk: tk, off: rec.Offset})
			}
		}
		if sr.atLeast {
			last := fp.Records[len(fp.Records)-1].Offset
			if err := sr.tracker.Advance(pt.tp, last+1); err != nil {
				prepErr = fmt.Errorf("runner: sink commit tracker: %w", err)
				return
			}
		}
		if len(pt.outs) > 0 {
			parts = append(parts, pt)
		}
	})
	if prepErr != nil {
		return prepErr
	}
	sem := make(chan struct{}, sr.c.Concurrency)
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, pt := range parts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			outs := make([]stage.Output, len(pt.outs))
			for j, p := range pt.outs {
				outs[j] = p.out
			}
			if err := sr.write(ctx, pt.tp, outs); err != nil {
				errs[i] = &sink.WriteError{Topic: pt.tp.Topic, Partition: pt.tp.Partition, First: pt.outs[0].off, Last: pt.outs[len(pt.outs)-1].off, Err: err}
				return
			}
			if !sr.atLeast {
				return
			}
			for _, p := range pt.outs {
				if err := sr.tracker.Done(p.tk); err != nil {
					errs[i] = fmt.Errorf("runner: sink commit tracker: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prepare is the sink's Prepare with the InvalidRecords policy applied to
// an invalid record: Crash returns its *transformer.InvalidRecordError;
// Skip returns no outputs (the record is released at once); Substitute
// prepares the record with the hook's value; DeadLetter produces the
// record's dead letter synchronously and returns no outputs, so the record
// is completed, and its offset committed, only after the dead letter is
// durable.
func (sr *sinkRun) prepare(ctx context.Context, rec *kgo.Record) ([]stage.Output, error) {
	outs, err := sr.snk.Prepare(ctx, rec)
	if err == nil {
		return outs, nil
	}
	ie, ok := batch.AsInvalid(rec, err)
	if !ok {
		return nil, err
	}
	pol := sr.pol
	switch pol.Mode {
	case batch.Skip:
		batch.Log(pol, ie)
		pol.Skipped.Add(1)
		return nil, nil
	case batch.Substitute:
		sub, err := batch.SubstitutedRecord(pol, rec, ie)
		if err != nil {
			return nil, err
		}
		outs, err := sr.snk.Prepare(ctx, sub)
		if err != nil {
			if ie2, ok := batch.AsInvalid(sub, err); ok {
				return nil, fmt.Errorf("%w (policy substitute: the substitute value is invalid too)", ie2)
			}
			return nil, err
		}
		batch.Log(pol, ie)
		pol.Substituted.Add(1)
		return outs, nil
	case batch.DeadLetter:
		dl := batch.DeadLetterRecord(pol, rec, ie)
		if err := sr.dlq.ProduceSync(ctx, dl).FirstErr(); err != nil {
			return nil, fmt.Errorf("runner: sink: producing the dead letter of %s[%d]@%d to topic %q: %w",
				rec.Topic, rec.Partition, rec.Offset, pol.DeadLetterTopic, err)
		}
		batch.Log(pol, ie)
		pol.DeadLettered.Add(1)
		return nil, nil
	}
	return nil, ie
}

// commitAsync commits offs without waiting; a failure is logged with its
// topic, partition and offset and retried with the next cycle's commit.
func (sr *sinkRun) commitAsync(ctx context.Context, offs []acks.Offset) {
	if len(offs) == 0 {
		return
	}
	sr.consumer.CommitOffsets(ctx, acks.EpochOffsets(offs), func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		sr.commitDone(offs, resp, err, "async")
	})
}

func (sr *sinkRun) commitSync(ctx context.Context, offs []acks.Offset, why string) {
	sr.consumer.CommitOffsetsSync(ctx, acks.EpochOffsets(offs), func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		sr.commitDone(offs, resp, err, why)
	})
}

func (sr *sinkRun) commitDone(offs []acks.Offset, resp *kmsg.OffsetCommitResponse, err error, why string) {
	log := sr.c.Logger
	failed := func(o acks.Offset, err error) {
		// Not fatal: the group offset does not advance, and the records
		// are re-delivered after a crash. Never silent.
		log.Error("sink offset commit failed", "commit", why, "group", sr.c.Group(),
			"topic", o.Topic, "partition", o.Partition, "offset", o.Offset, "err", err)
		sr.tracker.CommitFailed(o)
	}
	if err != nil {
		for _, o := range offs {
			failed(o, err)
		}
		return
	}
	perr := map[acks.TopicPartition]error{}
	if resp != nil {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
					perr[acks.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = e
				}
			}
		}
	}
	for _, o := range offs {
		if e := perr[acks.TopicPartition{Topic: o.Topic, Partition: o.Partition}]; e != nil {
			failed(o, e)
		} else {
			sr.c.Metrics.SinkCommitted(o.Topic, o.Partition, o.Offset)
			log.Debug("sink offset committed", "commit", why, "topic", o.Topic, "partition", o.Partition, "offset", o.Offset)
		}
	}
}

// finalCommit commits every written offset synchronously on close.
func (sr *sinkRun) finalCommit() {
	offs := sr.tracker.All()
	if len(offs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sr.commitSync(ctx, offs, "final")
}
