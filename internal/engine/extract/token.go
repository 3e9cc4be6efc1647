package extract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/twmb/franz-go/pkg/kgo"
)

// errRevoked: the token moved (or Run is stopping) while a page was open.
var errRevoked = errors.New("extractor: ownership token revoked; page aborted")

// token is one held ownership token: partition N of every config topic.
// It owns the transactional producer {app}-{N}, the cursor store restored
// from changelog partition N, and the polls of the configs hashing to N.
type token struct {
	rn       *run
	n        int32
	ctx      context.Context // canceled on revocation and stop
	cancel   context.CancelFunc
	initDone chan struct{}
	ready    atomic.Bool
	polls    sync.WaitGroup

	// txnMu serializes the token's transactions (one producer has one
	// transaction at a time) and guards producer, closed and failed.
	txnMu    sync.Mutex
	producer *txn.Producer
	closed   bool
	failed   error

	// storeMu guards st: Get under the read lock, Apply and Close under
	// the write lock.
	storeMu sync.RWMutex
	st      *store.Store
}

func newToken(rn *run, n int32) *token {
	ctx, cancel := context.WithCancel(rn.ctx)
	return &token{
		rn:       rn,
		n:        n,
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
// nothing. The transaction is bounded by the transaction timeout and not
// cut off by ctx.
func (tk *token) commit(ctx context.Context, key []byte, recs []*kgo.Record, w *store.Write) error {
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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tk.rn.o.TransactionTimeout)
	defer cancel()
	all := recs
	if w != nil {
		all = append(all[:len(all):len(all)], changelog.Record(tk.rn.changelog, tk.n, *w))
	}
	if _, err := tk.producer.Commit(ctx, all, nil); err != nil {
		tk.failed = fmt.Errorf("token %d: %w", tk.n, err)
		return tk.failed
	}
	if w != nil {
		// The cursor and the store's checkpoint move in one batch (see
		// task.CommitOpen): a warm restart replays only what follows.
		tk.storeMu.Lock()
		var err error
		if next, ok := changelog.NextOffset(all, tk.rn.changelog, tk.n); ok {
			err = tk.st.ApplyThrough([]store.Write{*w}, next)
		} else {
			err = tk.st.Apply([]store.Write{*w})
		}
		tk.storeMu.Unlock()
		if err != nil {
			tk.failed = fmt.Errorf("token %d: page committed but the cursor store update failed (restored from the changelog on restart): %w", tk.n, err)
			return tk.failed
		}
	}
	return nil
}

// init fences the token's previous owners, restores its cursors and
// waits until the config table holds every config they saw.
func (tk *token) init() error {
	rn, o := tk.rn, tk.rn.o
	began := time.Now()
	// The fence is not cut short by a revocation: a canceled
	// InitProducerID may still reach the broker, after the next owner's
	// fence, and fence that owner. Teardown waits for it (initDone).
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(tk.ctx), o.TransactionTimeout)
	// A page's records carry -1 (the partitioner) or their explicit
	// partition (Output.ToPartition).
	p, err := txn.OpenRouted(fctx, o.TransactionalID(tk.n), o.TransactionTimeout,
		txn.Routing{Changelog: rn.changelog, Explicit: true}, o.ClientOpts()...)
	fcancel()
	if err != nil {
		return fmt.Errorf("token %d: %w", tk.n, err)
	}
	if tk.ctx.Err() != nil {
		p.Close() // revoked while fencing
		return nil
	}
	st, err := store.Open(tk.ctx, o.StoreDir(tk.n), store.Options{ApplicationID: o.ApplicationID, Logger: o.Logger})
	if err != nil {
		p.Close()
		return fmt.Errorf("token %d: %w", tk.n, err)
	}
	res, err := changelog.Recover(tk.ctx, rn.adm, rn.changelog, tk.n, st, o.ClientOpts()...)
	if err != nil {
		p.Close()
		st.Close()
		return fmt.Errorf("token %d: %w", tk.n, err)
	}
	// The previous owners read the config topics with read_committed
	// isolation, so below the last stable offsets, which only grow:
	// once the table has read up to the offsets listed now, after the
	// fence, it holds every config (and every tombstone) they saw. Before
	// that a config they polled may be missing here (this table lags):
	// its cursor would look stale, and a config they saw deleted may still
	// be here, without its cursor. Neither is polled or swept before.
	synced := time.Now()
	if err := rn.table.Sync(tk.ctx); err != nil {
		p.Close()
		st.Close()
		return fmt.Errorf("token %d: waiting for the config table to catch up: %w", tk.n, err)
	}
	tableWait := time.Since(synced)
	// Cursors of configs tombstoned while another instance (or none)
	// held the token: deleted by startDue like any tombstoned config's.
	var stale []string
	if !o.KeepCursors {
		err = st.Range(func(key, _ []byte) bool {
			if _, ok := rn.table.Get(key); !ok {
				stale = append(stale, string(key))
			}
			return true
		})
		if err != nil {
			p.Close()
			st.Close()
			return fmt.Errorf("token %d: %w", tk.n, err)
		}
	}
	tk.txnMu.Lock()
	if tk.closed {
		tk.txnMu.Unlock()
		p.Close()
		st.Close()
		return nil
	}
	tk.producer = p
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
	o.Logger.Info("extractor token ready", "token", tk.n, "cursors restored", res.Records, "full restore", res.Full, "reason", res.Reason,
		"stale cursors", len(stale), "config table wait", tableWait, "took", time.Since(began))
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
