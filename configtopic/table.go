package configtopic

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
)

// Table is the per-process copy of the config topics. Build it with New and
// call Run once.
type Table[C any] struct {
	cfg     cfg
	decoder Decoder[C]
	enrich  EnrichFunc[C]

	mu      sync.RWMutex
	entries map[string]Entry[C]
	changed chan struct{}
	// pos is, per config partition, the offset up to which entries
	// reflect the log (the next offset to read); moved is closed (and
	// replaced) when a position advances. Both under mu.
	pos   map[partition]int64
	moved chan struct{}

	// cl is the client of Run's reads, set before Ready closes; Sync
	// lists offsets and reads with it.
	cl  *kgo.Client
	adm *kadm.Client

	stats struct {
		bootstrapRecords, superseded atomic.Int64
	}

	ready     chan struct{}
	readyOnce sync.Once
	ran       chan struct{} // closed when Run starts
	done      chan struct{} // closed when Run returns
	runErr    error
}

// New checks the configuration and returns a Table. Every problem is
// reported at once as *flechtwerk.ConfigError values joined with
// errors.Join; New does no I/O.
func New[C any](opts ...Opt) (*Table[C], error) {
	var c cfg
	for _, o := range opts {
		o.apply(&c)
	}
	t := &Table[C]{
		cfg:     c,
		entries: map[string]Entry[C]{},
		changed: make(chan struct{}),
		pos:     map[partition]int64{},
		moved:   make(chan struct{}),
		ready:   make(chan struct{}),
		ran:     make(chan struct{}),
		done:    make(chan struct{}),
	}
	var errs []error
	bad := func(code flechtwerk.Code, field, format string, args ...any) {
		errs = append(errs, flechtwerk.Errorf(code, field, format, args...))
	}
	if len(c.brokers) == 0 {
		bad(flechtwerk.CodeNoBrokers, "SeedBrokers", "no seed brokers")
	}
	if len(c.topics) == 0 {
		bad(flechtwerk.CodeNoConfigTopics, "Topics", "no config topics")
	}
	seen := map[string]bool{}
	for _, name := range c.topics {
		if name == "" {
			bad(flechtwerk.CodeInvalidOption, "Topics", "empty topic name")
		}
		if seen[name] {
			bad(flechtwerk.CodeDuplicateTopic, "Topics", "topic %q listed twice", name)
		}
		seen[name] = true
	}
	var zero C
	switch d := c.decoder.(type) {
	case nil:
		t.decoder = JSON[C]()
	case Decoder[C]:
		t.decoder = d
	default:
		bad(flechtwerk.CodeInvalidOption, "Codec", "decoder %T does not decode the config type %T", d, zero)
	}
	switch fn := c.enrich.(type) {
	case nil:
	case EnrichFunc[C]:
		t.enrich = fn
	default:
		bad(flechtwerk.CodeInvalidOption, "Enrich", "enrich hook %T does not take the config type %T", fn, zero)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if t.cfg.logger == nil {
		t.cfg.logger = slog.New(slog.DiscardHandler)
	}
	t.cfg.partitionCheck = 30 * time.Second
	return t, nil
}

// Topics returns the config topics.
func (t *Table[C]) Topics() []string { return slices.Clone(t.cfg.topics) }

// Get returns the live config of key.
func (t *Table[C]) Get(key []byte) (Entry[C], bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.entries[string(key)]
	return e, ok
}

// Len returns the number of live configs.
func (t *Table[C]) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.entries)
}

// Keys returns the keys of the live configs in byte order.
func (t *Table[C]) Keys() [][]byte {
	t.mu.RLock()
	keys := make([]string, 0, len(t.entries))
	for k := range t.entries {
		keys = append(keys, k)
	}
	t.mu.RUnlock()
	sort.Strings(keys)
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}

// Range calls fn for every live config in key order, on a snapshot taken
// when Range is called, until fn returns false.
func (t *Table[C]) Range(fn func(Entry[C]) bool) {
	t.mu.RLock()
	es := make([]Entry[C], 0, len(t.entries))
	for _, e := range t.entries {
		es = append(es, e)
	}
	t.mu.RUnlock()
	slices.SortFunc(es, func(a, b Entry[C]) int { return bytes.Compare(a.Key, b.Key) })
	for _, e := range es {
		if !fn(e) {
			return
		}
	}
}

// Changed returns a channel that is closed at the next change of the
// Table (a config added, replaced or removed).
func (t *Table[C]) Changed() <-chan struct{} {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.changed
}

// Stats are counters of a Table's bootstrap.
type Stats struct {
	// BootstrapRecords is the number of data records the bootstrap read
	// (values and tombstones, below the last stable offsets listed when
	// Run started).
	BootstrapRecords int64
	// Superseded is the number of values the bootstrap skipped because a
	// later record of their key replaced them: they were never decoded or
	// enriched, so a bad value that was replaced does not stop the Table.
	// Each is logged once at debug level with topic, partition and offset.
	Superseded int64
}

// Stats returns the Table's counters so far.
func (t *Table[C]) Stats() Stats {
	return Stats{
		BootstrapRecords: t.stats.bootstrapRecords.Load(),
		Superseded:       t.stats.superseded.Load(),
	}
}

// Ready returns a channel that is closed once the Table has read every
// config partition up to the last stable offset listed when Run started
// (judged by fetch position, so records removed by the log cleaner do not
// hold it back) and installed the surviving configs. A
// transaction of a config writer that is open at that moment can delay
// readiness until it ends (at the latest, its transaction timeout).
func (t *Table[C]) Ready() <-chan struct{} { return t.ready }

// WaitReady blocks until the Table is ready, Run ended (it then returns
// Run's error, or an error saying Run ended) or ctx is done.
func (t *Table[C]) WaitReady(ctx context.Context) error {
	select {
	case <-t.ready:
		return nil
	default:
	}
	select {
	case <-t.ready:
		return nil
	case <-t.done:
		select {
		case <-t.ready:
			return nil
		default:
		}
		if t.runErr != nil {
			return t.runErr
		}
		return errors.New("configtopic: Run ended before the table was ready")
	case <-ctx.Done():
		return ctx.Err()
	}
}
