package configtopic

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Sync blocks until the Table reflects every record of the config topics
// below the last stable offsets that Sync lists when it starts (after the
// Table is ready): every config record that a read_committed reader
// anywhere could have read before Sync was called. It returns nil then,
// Run's error (or an error saying Run ended) when Run ends first, or ctx's
// error.
//
// A Table can lag behind the log (a slow fetch, a slow Enrich, a broker it
// cannot reach); Sync is the barrier that tells the Table holds at least
// what another process saw at some earlier moment. Last stable offsets
// never go back, also across leader changes (KIP-207). A partition is
// judged by the Table's position: up to where its entries reflect the log,
// transaction markers included. When the position is below the listed
// offset, Sync reads the rest of the partition itself: if nothing below
// the offset is left that the Table would apply (aborted batches, records
// the log cleaner removed), the partition is done; otherwise Sync waits
// until the Table has applied the last such record.
func (t *Table[C]) Sync(ctx context.Context) error {
	if err := t.WaitReady(ctx); err != nil {
		return err
	}
	parts, err := t.targets(ctx, t.adm)
	if err != nil {
		return t.ended(ctx, err)
	}
	for _, p := range parts {
		if err := t.syncPartition(ctx, p); err != nil {
			return t.ended(ctx, err)
		}
	}
	return nil
}

// errEnded: Run ended without an error while Sync waited.
var errEnded = errors.New("configtopic: Run ended")

// ended returns the reason Sync stopped: Run's end, ctx, or err.
func (t *Table[C]) ended(ctx context.Context, err error) error {
	select {
	case <-t.done:
		if t.runErr != nil {
			return t.runErr
		}
		return errEnded
	default:
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// position returns the Table's position in p, and whether it has one (a
// partition added after the bootstrap has none until its first record).
func (t *Table[C]) position(p partition) (int64, bool, <-chan struct{}) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	o, ok := t.pos[p]
	return o, ok, t.moved
}

// syncPartition waits until the Table has applied every record of p below
// p.end.
func (t *Table[C]) syncPartition(ctx context.Context, p partRange) error {
	key := partition{p.topic, p.partition}
	from, ok, _ := t.position(key)
	if ok && from >= p.end {
		return nil
	}
	if !ok || from < p.start {
		// What lies below the log start is gone for every reader.
		from = p.start
	}
	last := int64(-1)
	if from < p.end {
		err := readRange(ctx, t.cl, p.topic, p.partition, from, p.end, func(r *kgo.Record) error {
			last = r.Offset
			return nil
		})
		if err != nil {
			return err
		}
	}
	for {
		o, ok, moved := t.position(key)
		if last < 0 || ok && o > last {
			return nil
		}
		select {
		case <-moved:
		case <-t.done:
			return errEnded // ended reports Run's error
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
