package extractor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/store"
)

// Token returns the ownership token of a config key among tokens tokens:
// Kafka's default partitioner hash (murmur2) of key modulo tokens. A config
// written with Kafka's default partitioner therefore sits on the partition
// whose holder owns it, but ownership follows the key, not the partition the
// record was written to.
func Token(key []byte, tokens int32) int32 {
	if tokens <= 0 {
		return 0
	}
	return int32((murmur2(key) & 0x7fffffff) % uint32(tokens))
}

// murmur2 is the hash of Kafka's default partitioner.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		b = b[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// errRevoked: the token moved (or Run is stopping) while a page was open.
var errRevoked = errors.New("extractor: ownership token revoked; page aborted")

// token is one held ownership token: partition N of every config topic.
// It owns the transactional producer {app}-{N}, the cursor store restored
// from changelog partition N, and the polls of the configs hashing to N.
type token struct {
	n        int32
	txnID    string
	ctx      context.Context // canceled on revocation and stop
	cancel   context.CancelFunc
	initDone chan struct{}
	ready    atomic.Bool
	polls    sync.WaitGroup

	// txnMu serializes the token's transactions (one producer has one
	// transaction at a time) and guards producer, closed and failed.
	txnMu    sync.Mutex
	producer *kgo.Client
	closed   bool
	failed   error

	// storeMu guards st: Get under the read lock, Apply and Close under
	// the write lock.
	storeMu sync.RWMutex
	st      *store.Store
}

func newToken(parent context.Context, app string, n int32) *token {
	ctx, cancel := context.WithCancel(parent)
	return &token{
		n:        n,
		txnID:    fencing.TransactionalID(app, n),
		ctx:      ctx,
		cancel:   cancel,
		initDone: make(chan struct{}),
	}
}

// cursor returns the committed cursor of key.
func (tk *token) cursor(key []byte) ([]byte, bool, error) {
	tk.storeMu.RLock()
	defer tk.storeMu.RUnlock()
	if tk.st == nil {
		return nil, false, errRevoked
	}
	return tk.st.Get(key)
}

// commit makes one page visible: recs and, when w is set, the cursor write
// w of key (a new cursor, or a delete) on the token's changelog partition,
// in one transaction. A cursor write that changes nothing (the committed
// cursor again, or a delete of a key without a cursor) is left out, and
// with no records nothing is written at all: no transaction that changes
// nothing. The transaction is bounded by txnTimeout and not cut off by ctx.
func (tk *token) commit(ctx context.Context, rn *run, key []byte, recs []*kgo.Record, w *store.Write) error {
	tk.txnMu.Lock()
	defer tk.txnMu.Unlock()
	if tk.closed {
		return errRevoked
	}
	if tk.failed != nil {
		return tk.failed
	}
	if w != nil {
		// Only commits change the store, under txnMu: it holds the
		// committed cursor.
		tk.storeMu.RLock()
		cur, found, err := tk.st.Get(key)
		tk.storeMu.RUnlock()
		if err != nil {
			return fmt.Errorf("token %d: reading cursor: %w", tk.n, err)
		}
		if w.Delete && !found || !w.Delete && found && bytes.Equal(cur, w.Value) {
			w = nil
		}
	}
	if len(recs) == 0 && w == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rn.r.cfg.txnTimeout)
	defer cancel()
	err := tk.transact(ctx, rn, recs, w)
	if err != nil {
		tk.failed = err
		return err
	}
	if w != nil {
		tk.storeMu.Lock()
		err = tk.st.Apply([]store.Write{*w})
		tk.storeMu.Unlock()
		if err != nil {
			tk.failed = fmt.Errorf("token %d: page committed but the cursor store update failed (restored from the changelog on restart): %w", tk.n, err)
			return tk.failed
		}
	}
	return nil
}

func (tk *token) transact(ctx context.Context, rn *run, recs []*kgo.Record, w *store.Write) error {
	cl := tk.producer
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("token %d: begin transaction: %w", tk.n, fencing.Classify(tk.txnID, err))
	}
	all := recs
	if w != nil {
		all = append(all[:len(all):len(all)], changelog.Record(rn.changelog, tk.n, *w))
	}
	// ProduceSync waits for every record: the commit below is gated on
	// all produce results, never on a subset.
	if err := cl.ProduceSync(ctx, all...).FirstErr(); err != nil {
		return tk.abort(ctx, fmt.Errorf("token %d: produce: %w", tk.n, fencing.Classify(tk.txnID, err)))
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		// Unknown outcome: retry the end as an abort. If the commit did
		// land, the abort fails and the error still ends Run; the cursor
		// store is rebuilt from the changelog by the next owner.
		return tk.abort(ctx, fmt.Errorf("token %d: commit: %w", tk.n, fencing.ClassifyCommit(tk.txnID, err)))
	}
	return nil
}

func (tk *token) abort(ctx context.Context, cause error) error {
	// The commit's context may be spent: the abort gets its own time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cl := tk.producer
	if err := cl.AbortBufferedRecords(ctx); err != nil {
		return errors.Join(cause, fmt.Errorf("token %d: abort buffered records: %w", tk.n, err))
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return errors.Join(cause, fmt.Errorf("token %d: abort: %w", tk.n, fencing.Classify(tk.txnID, err)))
	}
	return cause
}

// init fences the token's previous owners and restores its cursors.
func (tk *token) init(rn *run) error {
	c := &rn.r.cfg
	began := time.Now()
	cl, err := fencing.Init(tk.ctx, tk.txnID, c.txnTimeout, append(rn.clientOpts(),
		kgo.RecordPartitioner(partitioner{changelog: rn.changelog}))...)
	if err != nil {
		return fmt.Errorf("token %d: %w", tk.n, err)
	}
	st, err := store.Open(tk.ctx, store.Dir(c.stateDir, c.appID, tk.n), store.Options{Logger: c.logger})
	if err != nil {
		cl.Close()
		return fmt.Errorf("token %d: %w", tk.n, err)
	}
	n, err := changelog.Restore(tk.ctx, rn.adm, rn.changelog, tk.n, st, rn.clientOpts()...)
	if err != nil {
		cl.Close()
		st.Close()
		return fmt.Errorf("token %d: %w", tk.n, err)
	}
	// Cursors of configs tombstoned while another instance (or none)
	// held the token: deleted by startDue like any tombstoned config's.
	var stale []string
	if c.tombstoned == DeleteCursors {
		err = st.Range(func(key, _ []byte) bool {
			if _, ok := rn.table.Get(key); !ok {
				stale = append(stale, string(key))
			}
			return true
		})
		if err != nil {
			cl.Close()
			st.Close()
			return fmt.Errorf("token %d: %w", tk.n, err)
		}
	}
	tk.txnMu.Lock()
	if tk.closed {
		tk.txnMu.Unlock()
		cl.Close()
		st.Close()
		return nil
	}
	tk.producer = cl
	tk.storeMu.Lock()
	tk.st = st
	tk.storeMu.Unlock()
	tk.txnMu.Unlock()
	rn.mu.Lock()
	for _, key := range stale {
		if rn.sched[key] == nil {
			rn.sched[key] = &schedule{}
		}
	}
	rn.mu.Unlock()
	tk.ready.Store(true)
	c.logger.Info("extractor token ready", "token", tk.n, "cursors restored", n, "stale cursors", len(stale), "took", time.Since(began))
	return nil
}

// teardown stops the token: its polls are canceled and their open pages
// aborted, an in-flight commit finishes, then the producer and the store
// close. Safe to call once per token.
func (tk *token) teardown() error {
	tk.cancel()
	<-tk.initDone
	tk.txnMu.Lock()
	tk.closed = true
	tk.txnMu.Unlock()
	tk.polls.Wait()
	if tk.producer != nil {
		// No transaction is open here (pages are buffered until they
		// commit); closing aborts nothing.
		tk.producer.Close()
	}
	tk.storeMu.Lock()
	defer tk.storeMu.Unlock()
	err := tk.st.Close()
	tk.st = nil
	return err
}

// partitioner sends changelog records to their explicit partition and hashes
// every other record's key like Kafka's default partitioner.
type partitioner struct{ changelog string }

var (
	manual = kgo.ManualPartitioner()
	hashed = kgo.StickyKeyPartitioner(nil)
)

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.changelog {
		return manual.ForTopic(topic)
	}
	return hashed.ForTopic(topic)
}
