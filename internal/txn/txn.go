package txn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/authz"
)

// AbortTimeout bounds an abort; when it cannot finish, the next owner's
// fence or the transaction timeout aborts the transaction instead.
const AbortTimeout = 10 * time.Second

// ErrProducerReinitialized means the producer's ID or epoch changed while
// a transaction was open: franz-go re-initialized the producer ID in the
// middle of it (a produce refused with a log start offset past what the
// producer wrote to the partition makes it do so, and retry the batch
// under the new epoch). That InitProducerId aborted everything the
// transaction had written before, so the transaction is aborted instead of
// committed: a commit would make only its later part visible. Transient
// reports it: the task is re-initialized.
var ErrProducerReinitialized = errors.New("txn: the producer was re-initialized during the transaction, which aborted what it had written")

// Producer is a transactional producer with a static transactional ID.
// It runs one transaction at a time; the caller serializes its calls.
// After a transaction failed (End or AddOffsets returned an error) it
// begins no other: Begin returns the failure.
type Producer struct {
	cl    *kgo.Client
	id    string
	route router

	// retryCap is the longest wait between two tries of a request
	// answered CONCURRENT_TRANSACTIONS or another retryable error
	// (maxRetryWait unless SetRetryCap).
	retryCap time.Duration

	mu     sync.Mutex
	failed error // the first failed transaction's error
}

// maxRetryWait is a Producer's default retryCap.
const maxRetryWait = 200 * time.Millisecond

// SetRetryCap sets the longest wait between two tries of AddOffsetsToTxn
// or TxnOffsetCommit (from 2ms, doubling; 200ms by default). A producer
// that every task of an instance waits for (a Lane's) retries sooner: its
// next transaction opens once the markers of the previous one are
// written, and the coordinator answers CONCURRENT_TRANSACTIONS until
// then. Call it before the first transaction.
func (p *Producer) SetRetryCap(d time.Duration) { p.retryCap = d }

// fail records err (not nil) as the failure of a transaction and returns
// it. From then on Begin refuses: a fenced producer's abort can be
// answered with the new owner's epoch (the coordinator takes an abort at
// the epoch just before its own for a retry of an ended transaction, and
// a fence bumps the epoch by one), so its client would write under the
// new owner's producer epoch, inside the new owner's transaction. Only a
// new producer, which fences the transactional ID, may write again.
func (p *Producer) fail(err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed == nil {
		p.failed = err
	}
	return err
}

// Open creates the producer of transactional ID id and fences every
// previous owner of id (fencing.Init). Records to changelog go to their
// explicit partition, all others by the murmur2 hash of their key. opts
// are the client options (seed brokers, TLS, SASL, logger).
func Open(ctx context.Context, id string, timeout time.Duration, changelog string, opts ...kgo.Opt) (*Producer, error) {
	return OpenRouted(ctx, id, timeout, Routing{Changelog: changelog}, opts...)
}

// OpenRouted is Open with the records placed as rt says. A record whose
// partition (explicit, or chosen by its topic's partitioner) is out of its
// topic's range fails its transaction with an *flechtwerk.OutputError.
func OpenRouted(ctx context.Context, id string, timeout time.Duration, rt Routing, opts ...kgo.Opt) (*Producer, error) {
	route := router{rt: rt, bad: new(sync.Map)}
	all := append(slices.Clone(opts), kgo.RecordPartitioner(route))
	cl, err := fencing.Init(ctx, id, timeout, all...)
	if err != nil {
		return nil, err
	}
	return &Producer{cl: cl, id: id, route: route, retryCap: maxRetryWait}, nil
}

// ID returns the transactional ID.
func (p *Producer) ID() string { return p.id }

// Offsets are the group offsets a transaction commits: the next offset to
// consume per topic and partition, of one partition (a task's
// transaction) or of several (a transaction shared by the tasks of an
// instance).
type Offsets struct {
	// Group is the consumer group.
	Group string
	// Next is the next offset to consume per topic and partition.
	Next map[string]map[int32]int64
	// TopicIDs are the topics' IDs, for TxnOffsetCommit v6+.
	TopicIDs map[string][16]byte
	// Metadata is every offset's commit metadata (empty: none).
	Metadata string
	// Member returns the identity of the group member that owns the
	// partition: its member ID and generation (kgo.Client.GroupMetadata).
	// It is read each time TxnOffsetCommit is sent, and the request
	// carries it (KIP-447), so the coordinator refuses the offsets of a
	// member that left the group or whose generation is stale, exactly as
	// it refuses that member's own OffsetCommit: the transactional and
	// the direct commit paths of a partition are fenced by the same
	// owner. Required: without it the offsets are refused here.
	Member func() (memberID string, generation int32)
}

// Of returns the offsets of one partition: next per topic.
func Of(partition int32, next map[string]int64) map[string]map[int32]int64 {
	out := make(map[string]map[int32]int64, len(next))
	for topic, off := range next {
		out[topic] = map[int32]int64{partition: off}
	}
	return out
}

// ErrNoMember means a transaction's offsets had no group member to carry:
// Offsets.Member was nil, or the member has no generation (it has not
// joined, or lost its session). Nothing was committed; the transaction is
// aborted.
var ErrNoMember = errors.New("txn: offsets need the identity of the group member that owns the partition")

// Timing says how long the parts of a commit took: the wait for the
// records' results (Produce), then the offsets (Offsets: TxnOffsetCommit,
// and AddOffsetsToTxn unless it was sent when the transaction opened),
// and the whole commit through EndTxn (Total).
type Timing struct {
	Produce, Offsets, Total time.Duration
}

// Commit makes recs and, when offsets is not nil, the group's offsets
// visible atomically in one transaction: Begin, Send every record, End
// (every result is checked; an error names the record's topic and
// partition; the offsets join the transaction once the records are
// flushed). On any failure the transaction is aborted with its own time
// (AbortTimeout) and the error returned is classified (errors.Is(err,
// fencing.ErrFenced) holds when the producer was fenced). ctx bounds the
// commit; the caller decides whether it may be canceled.
func (p *Producer) Commit(ctx context.Context, recs []*kgo.Record, offsets *Offsets) (Timing, error) {
	x, err := p.Begin(ctx)
	if err != nil {
		return Timing{}, err
	}
	for _, r := range recs {
		x.Send(r)
	}
	return x.End(ctx, offsets)
}

// abort aborts the open transaction after cause and returns cause, joined
// with the abort's own error if it failed.
func (p *Producer) abort(ctx context.Context, cause error) error {
	// The commit's context may be spent (that may be why we abort): the
	// abort gets its own time, so that it reaches the broker.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), AbortTimeout)
	defer cancel()
	if err := p.Abort(ctx); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// Abort drops buffered records and aborts the open transaction; with no
// transaction open it does nothing.
func (p *Producer) Abort(ctx context.Context) error {
	if err := p.cl.AbortBufferedRecords(ctx); err != nil {
		return fmt.Errorf("abort buffered records: %w", err)
	}
	if err := p.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("abort: %w", txnACL(fencing.Classify(p.id, err), p.id))
	}
	return nil
}

// partitionsPublished returns once franz-go has published the partitions
// of every topic the transaction wrote. A client's first records to a
// topic wait for its metadata; franz-go hands them to their partitions,
// which may send and acknowledge them, before it publishes the topic's
// partitions. An EndTxn that bumps the epoch (transaction version 2)
// resets the sequence numbers of the published partitions only: ending
// in that gap leaves a partition on its old sequence under the new epoch,
// and the next transaction's first write to it is refused
// (OUT_OF_ORDER_SEQUENCE_NUMBER). Both the publication and
// AbortBufferedRecords hold the client's lock on waiting topics; with
// every record flushed, AbortBufferedRecords drops nothing.
func (p *Producer) partitionsPublished(ctx context.Context) error {
	if err := p.cl.AbortBufferedRecords(ctx); err != nil {
		return fmt.Errorf("waiting for the written topics' partitions: %w", err)
	}
	return nil
}

// Close closes the client. It aborts nothing: call Abort first when a
// transaction may be open.
func (p *Producer) Close() { p.cl.Close() }

// addOffsets adds the group's offsets partition to the open transaction
// of producer ID id at epoch (AddOffsetsToTxn).
func (p *Producer) addOffsets(ctx context.Context, group string, id int64, epoch int16) error {
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID = p.id
	add.ProducerID = id
	add.ProducerEpoch = epoch
	add.Group = group
	if err := retry(ctx, p.retryCap, func() error {
		resp, err := add.RequestWith(ctx, p.cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}); err != nil {
		return fmt.Errorf("AddOffsetsToTxn: %w", err)
	}
	return nil
}

// sendOffsets adds the group's offsets to the open transaction:
// AddOffsetsToTxn (unless added is set: it was sent when the transaction
// opened) then TxnOffsetCommit, carrying the member ID and generation of
// the group member that owns the partition (Offsets.Member), read when the
// request is sent. A generation refused as stale is sent again once the
// member, under the same ID, holds a newer one (the group rebalanced
// between the read and the request; the member, which still runs the task,
// holds the partition in it, since a revocation stops the task before the
// member rejoins again); any other refusal, or no newer generation before
// ctx ends, aborts the transaction.
func (p *Producer) sendOffsets(ctx context.Context, o *Offsets, added bool) error {
	id, epoch, err := p.cl.ProducerID(ctx)
	if err != nil {
		return err
	}
	if o.Member == nil {
		return fmt.Errorf("%w (group %s)", ErrNoMember, o.Group)
	}
	if !added {
		if err := p.addOffsets(ctx, o.Group, id, epoch); err != nil {
			return err
		}
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID = p.id
	req.Group = o.Group
	req.ProducerID = id
	req.ProducerEpoch = epoch
	topics := make([]string, 0, len(o.Next))
	for topic := range o.Next {
		topics = append(topics, topic)
	}
	slices.Sort(topics)
	for _, topic := range topics {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		rt.TopicID = o.TopicIDs[topic]
		parts := make([]int32, 0, len(o.Next[topic]))
		for p := range o.Next[topic] {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		for _, p := range parts {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition = p
			rp.Offset = o.Next[topic][p]
			rp.LeaderEpoch = -1
			if o.Metadata != "" {
				rp.Metadata = &o.Metadata
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return retry(ctx, p.retryCap, func() error {
		member, gen := o.Member()
		if member == "" || gen < 0 {
			// Never generation -1: the coordinator would take it
			// unchecked.
			return fmt.Errorf("%w: group %s has no generation for the member that owns the task (not joined, its session was lost, or it rejoined under a new member id): %w", ErrNoMember, o.Group, kerr.UnknownMemberID)
		}
		req.MemberID, req.Generation = member, gen
		resp, err := req.RequestWith(ctx, p.cl)
		if err != nil {
			return err
		}
		for i, rt := range resp.Topics {
			name := rt.Topic
			if name == "" && i < len(topics) {
				name = topics[i]
			}
			for _, rp := range rt.Partitions {
				err := kerr.ErrorForCode(rp.ErrorCode)
				if err == nil {
					continue
				}
				if errors.Is(err, kerr.IllegalGeneration) && awaitNewerGeneration(ctx, o.Member, member, gen) {
					return errNewerGeneration
				}
				return fmt.Errorf("TxnOffsetCommit %s/%d (member %s, generation %d): %w", name, rp.Partition, member, gen,
					authz.Wrap(err, "Read", map[authz.Resource]string{authz.Topic: name, authz.Group: o.Group, authz.TransactionalID: p.id}))
			}
		}
		return nil
	})
}

// awaitNewerGeneration waits until member, whose generation gen was
// refused, holds a newer generation under the same ID, and reports
// whether it does before ctx ends or the ID changes. The coordinator
// moves to the next generation when every member has rejoined, and
// answers their JoinGroup requests then: a member still running the task
// (a revocation stops it first) learns the new generation moments later.
func awaitNewerGeneration(ctx context.Context, identity func() (string, int32), member string, gen int32) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		m, g := identity()
		if m != member {
			return false
		}
		if g > gen {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// errNewerGeneration asks retry to send TxnOffsetCommit again: it was
// refused for a generation the member has left for a newer one.
var errNewerGeneration = errors.New("txn: the member joined a newer generation")

// retry runs fn until it succeeds, fails with a non-retryable error, or ctx
// ends. CONCURRENT_TRANSACTIONS (the previous transaction's markers are
// still being written) is retryable here, and so is a network error (a
// coordinator that is restarting refuses the dial until another broker
// took over): both requests it retries, AddOffsetsToTxn and
// TxnOffsetCommit, may be sent again within the same transaction.
func retry(ctx context.Context, maxWait time.Duration, fn func() error) error {
	backoff := 2 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if !errors.Is(err, kerr.ConcurrentTransactions) && !errors.Is(err, errNewerGeneration) &&
			!kerr.IsRetriable(err) && !(network(err) && ctx.Err() == nil) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxWait)
	}
}

// Partitioner sends records to changelog to their explicit partition and
// hashes every other record's key like Kafka's default partitioner
// (murmur2). An empty changelog (a stateless owner) sends nothing to an
// explicit partition, not even a record of the topic "".
func Partitioner(changelog string) kgo.Partitioner {
	return router{rt: Routing{Changelog: changelog}, bad: new(sync.Map)}
}

var (
	manual = kgo.ManualPartitioner()
	hashed = kgo.StickyKeyPartitioner(nil)
)

// Txn is an open transaction of a Producer that spans several calls: its
// records are produced asynchronously as they come (Send), and End checks
// the result of every one of them before it commits. A Producer runs one
// Txn at a time, and no Commit while one is open. Send may be called
// from several goroutines at once (the tasks sharing a Lane's
// transaction); End follows every Send.
type Txn struct {
	p      *Producer
	ctx    context.Context
	cancel context.CancelFunc
	sent   atomic.Int64

	// group is the group whose offsets partition AddOffsets added.
	group string
	// pid and epoch are the producer's when the transaction opened,
	// before anything was sent; End commits only under them.
	pid   int64
	epoch int16

	mu     sync.Mutex
	failed int
	first  *kgo.Record
	err    error
}

// Begin opens a transaction and records the producer ID and epoch it
// opens under (End commits only under them; see ErrProducerReinitialized).
// ctx bounds the wait for the producer ID, which is loaded already unless
// franz-go is re-initializing it.
func (p *Producer) Begin(ctx context.Context) (*Txn, error) {
	p.mu.Lock()
	failed := p.failed
	p.mu.Unlock()
	if failed != nil {
		return nil, fmt.Errorf("begin transaction: an earlier transaction of %s failed; only a new producer, which fences the transactional id, may write again: %w", p.id, failed)
	}
	if err := p.cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("begin transaction: %w", txnACL(fencing.Classify(p.id, err), p.id))
	}
	id, epoch, err := p.cl.ProducerID(ctx)
	if err != nil {
		// Nothing was sent; the Producer begins no other transaction.
		return nil, p.fail(fmt.Errorf("begin transaction: producer id: %w", fencing.Classify(p.id, err)))
	}
	// Records are failed when the context of their Produce ends before
	// they are sent: the transaction's context ends only with it.
	tctx, cancel := context.WithCancel(context.Background())
	return &Txn{p: p, ctx: tctx, cancel: cancel, pid: id, epoch: epoch}, nil
}

// AddOffsets adds the offsets partition of group to the transaction
// before anything is sent (AddOffsetsToTxn), so that End only has to
// commit the offsets (TxnOffsetCommit) before it ends the transaction.
// It also makes the transaction's first produce wait for the previous
// transaction to complete: the coordinator answers AddOffsetsToTxn with
// CONCURRENT_TRANSACTIONS (retried here, from 2ms on) while the previous
// transaction's markers are being written, where a produce answered so
// would be retried by kgo only after a metadata refresh (up to
// MetadataMinAge, 5s by default). On error nothing was sent; the caller
// aborts, and the Producer begins no other transaction (see Begin). End's
// offsets must then be of group.
func (x *Txn) AddOffsets(ctx context.Context, group string) error {
	if err := x.p.addOffsets(ctx, group, x.pid, x.epoch); err != nil {
		return x.p.fail(fmt.Errorf("offsets to transaction: %w", fencing.Classify(x.p.id, err)))
	}
	x.group = group
	return nil
}

// Send produces rec into the transaction without waiting for its result.
// It blocks while the producer's buffer is full.
func (x *Txn) Send(rec *kgo.Record) {
	x.sent.Add(1)
	x.p.cl.Produce(x.ctx, rec, x.promise)
}

func (x *Txn) promise(r *kgo.Record, err error) {
	if err == nil {
		return
	}
	if oerr := x.p.route.outputError(r); oerr != nil {
		err = oerr
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.failed++
	if x.first == nil {
		x.first, x.err = r, err
	}
}

// Sent returns how many records were sent into the transaction.
func (x *Txn) Sent() int { return int(x.sent.Load()) }

// End commits the transaction with offsets (nil: none): it waits for every
// record sent, then adds the offsets to the transaction, checks all the
// results, and ends the transaction. On any failure the transaction
// is aborted with its own time (AbortTimeout); the error is classified
// like Commit's. ctx bounds the end; the caller decides whether it may be
// canceled. The Txn is done after End, whatever it returns; after an
// error the Producer begins no other transaction (see Begin).
func (x *Txn) End(ctx context.Context, offsets *Offsets) (Timing, error) {
	tm, err := x.end(ctx, offsets)
	if err != nil {
		return tm, x.p.fail(err)
	}
	return tm, nil
}

func (x *Txn) end(ctx context.Context, offsets *Offsets) (Timing, error) {
	defer x.cancel()
	var tm Timing
	began := time.Now()
	p := x.p
	added := x.group != ""
	if offsets != nil && added && offsets.Group != x.group {
		return tm, p.abort(ctx, fmt.Errorf("offsets of group %s, but the transaction added those of group %s", offsets.Group, x.group))
	}
	flushErr := p.cl.Flush(ctx)
	tm.Produce = time.Since(began)
	// The offsets follow the records, not beside them. Under transaction
	// version 2, Kafka adds a partition to the transaction when the first
	// write to it arrives (the partition verification), and the changelog's
	// partition is first written at the commit. A TxnOffsetCommit sent
	// while those writes were in flight was refused with
	// COORDINATOR_LOAD_IN_PROGRESS at about a third of the commits (kgo
	// retried it after a FindCoordinator), and the writes it met with
	// NOT_ENOUGH_REPLICAS (retried after a metadata refresh). One after the
	// other, neither was refused once, and End's p50 fell by 30%
	// (eosbench -trace-kgo at 20k records/s).
	var offErr error
	if offsets != nil && flushErr == nil {
		start := time.Now()
		offErr = p.sendOffsets(ctx, offsets, added)
		tm.Offsets = time.Since(start)
	}
	// Every record is acknowledged or failed and the offsets request
	// answered: no response is left that could make franz-go
	// re-initialize the producer ID now. A re-initialization is checked
	// first: records and offsets sent under the epoch it ended are refused
	// as fenced (INVALID_PRODUCER_EPOCH), which would end Run, where the
	// task only needs re-initializing. When the ID cannot be read (franz-go
	// failed it), the errors below say why.
	pidErr := x.samePID(ctx)
	if errors.Is(pidErr, ErrProducerReinitialized) {
		return tm, p.abort(ctx, pidErr)
	}
	x.mu.Lock()
	first, ferr, failed := x.first, x.err, x.failed
	x.mu.Unlock()
	if _, ok := errors.AsType[*flechtwerk.OutputError](ferr); ok && first != nil {
		return tm, p.abort(ctx, fmt.Errorf("%w (%d of %d records of the transaction failed)", ferr, failed, x.sent.Load()))
	}
	if first != nil {
		where := fmt.Sprintf("topic %s partition %d", first.Topic, first.Partition)
		if first.Partition < 0 {
			where = fmt.Sprintf("topic %s (no partition assigned)", first.Topic)
		}
		err := fmt.Errorf("produce to %s failed (%d of %d records of the transaction failed): %w", where, failed, x.sent.Load(),
			authz.Wrap(ferr, "Write", map[authz.Resource]string{authz.Topic: first.Topic, authz.TransactionalID: p.id}))
		return tm, p.abort(ctx, fencing.Classify(p.id, err))
	}
	if flushErr != nil {
		return tm, p.abort(ctx, fmt.Errorf("flushing the transaction's records: %w", flushErr))
	}
	if offErr != nil {
		return tm, p.abort(ctx, fmt.Errorf("offsets to transaction: %w", offsetsACL(fencing.Classify(p.id, offErr), p.id, offsets)))
	}
	if pidErr != nil {
		return tm, p.abort(ctx, pidErr)
	}
	if err := p.partitionsPublished(ctx); err != nil {
		return tm, p.abort(ctx, err)
	}
	if err := p.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return tm, p.abort(ctx, fmt.Errorf("commit: %w", txnACL(classifyCommit(p.id, err), p.id)))
	}
	tm.Total = time.Since(began)
	return tm, nil
}

// samePID returns ErrProducerReinitialized when the producer's ID or
// epoch is no longer the one the transaction opened under.
func (x *Txn) samePID(ctx context.Context) error {
	id, epoch, err := x.p.cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("producer id before the commit: %w", fencing.Classify(x.p.id, err))
	}
	if id != x.pid || epoch != x.epoch {
		return fmt.Errorf("%w (%s: producer %d epoch %d when the transaction opened, producer %d epoch %d at its commit)",
			ErrProducerReinitialized, x.p.id, x.pid, x.epoch, id, epoch)
	}
	return nil
}

// Abort aborts the transaction (see Producer.Abort). The Txn is done after
// it.
func (x *Txn) Abort(ctx context.Context) error {
	defer x.cancel()
	return x.p.Abort(ctx)
}

// txnACL names the ACL a refused transaction request needed: Write on the
// transactional id.
func txnACL(err error, id string) error {
	return authz.Wrap(err, "Write", map[authz.Resource]string{authz.TransactionalID: id})
}

// offsetsACL names the ACL a refused AddOffsetsToTxn or TxnOffsetCommit
// needed: Read on the group, Write on the transactional id, or Read on the
// input topic whose offset was refused (named in the error).
func offsetsACL(err error, id string, o *Offsets) error {
	names := map[authz.Resource]string{authz.TransactionalID: id, authz.Group: o.Group}
	topics := make([]string, 0, len(o.Next))
	for t := range o.Next {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	if len(topics) > 0 {
		names[authz.Topic] = topics[0]
	}
	return authz.Wrap(err, "Read", names)
}
