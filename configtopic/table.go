package configtopic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/topics"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Header is a Kafka record header (the same type as transformer.Header).
type Header = transformer.Header

// Record is one config record as read from a config topic (the same type as
// transformer.Record, so a transformer can use config records as they are).
type Record = transformer.Record

// Entry is the live config of one key: the record that set it and its
// decoded (and enriched) value.
type Entry[C any] struct {
	Record
	Config C
}

// Decoder decodes a config record's value. transformer.JSON and
// transformer.Bytes satisfy it too.
type Decoder[C any] interface {
	Decode([]byte) (C, error)
}

type jsonDecoder[C any] struct{}

func (jsonDecoder[C]) Decode(b []byte) (C, error) {
	var c C
	err := json.Unmarshal(b, &c)
	return c, err
}

// JSON returns the default decoder: encoding/json into C.
func JSON[C any]() Decoder[C] { return jsonDecoder[C]{} }

type bytesDecoder struct{}

func (bytesDecoder) Decode(b []byte) ([]byte, error) { return bytes.Clone(b), nil }

// Bytes returns a decoder that keeps the raw value.
func Bytes() Decoder[[]byte] { return bytesDecoder{} }

// EnrichFunc is applied once to every decoded config value that enters the
// Table: during the bootstrap once per surviving key, after the read
// reached the end; while running once per new record. It returns the
// config to keep, or an error that ends Run.
type EnrichFunc[C any] func(ctx context.Context, rec *Record, cfg C) (C, error)

// RecordError is a config record that could not be decoded or enriched:
// during the bootstrap the surviving value of its key, later a new record.
// Run ended with it; the Table keeps what it had before the record. Replace
// the record (write a new value or a tombstone for the key) and restart: a
// replaced value is not decoded again.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("configtopic: undecodable config record at topic %s partition %d offset %d (key %q): %v",
		e.Topic, e.Partition, e.Offset, e.Key, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// Opt configures a Table.
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	brokers   []string
	topics    []string
	decoder   any
	enrich    any
	kafkaOpts []kgo.Opt
	logger    *slog.Logger

	// partitionCheck is how often Run looks for partitions added to the
	// config topics.
	partitionCheck time.Duration
}

// SeedBrokers sets the brokers to bootstrap from (Kafka's
// bootstrap.servers). Required.
func SeedBrokers(brokers ...string) Opt { return opt(func(c *cfg) { c.brokers = brokers }) }

// Topics sets the config topics to read. Required; they must exist. They
// should be compacted (cleanup.policy=compact), or old configs age out of
// the log and vanish from new instances.
func Topics(topics ...string) Opt { return opt(func(c *cfg) { c.topics = topics }) }

// Codec sets the decoder of the record values. Default JSON[C](). Its type
// must match the Table's config type; a mismatch is a *flechtwerk.ConfigError
// with CodeInvalidOption.
func Codec[C any](d Decoder[C]) Opt { return opt(func(c *cfg) { c.decoder = d }) }

// Enrich sets a hook applied once to every decoded value that enters the
// Table (see EnrichFunc). Default: none.
// Its type must match the Table's config type.
func Enrich[C any](fn EnrichFunc[C]) Opt { return opt(func(c *cfg) { c.enrich = fn }) }

// WithKafkaOpts adds franz-go options to the Table's clients: TLS, SASL,
// dialers, client id. The isolation level and offsets are set by the Table.
func WithKafkaOpts(opts ...kgo.Opt) Opt {
	return opt(func(c *cfg) { c.kafkaOpts = append(c.kafkaOpts, opts...) })
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Opt { return opt(func(c *cfg) { c.logger = l }) }

// Table is the per-process copy of the config topics. Build it with New and
// call Run once.
type Table[C any] struct {
	cfg     cfg
	decoder Decoder[C]
	enrich  EnrichFunc[C]

	mu      sync.RWMutex
	entries map[string]Entry[C]
	changed chan struct{}

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

// Run reads the config topics until ctx is done (it then returns nil) or an
// error ends it: a missing topic (*flechtwerk.ConfigError, CodeMissingTopic),
// an undecodable record (*RecordError) or a fetch error. Run must be called
// once; a second call returns an error.
func (t *Table[C]) Run(ctx context.Context) error {
	select {
	case <-t.ran:
		return errors.New("configtopic: Run called twice")
	default:
		close(t.ran)
	}
	err := t.run(ctx)
	t.runErr = err
	close(t.done)
	return err
}

func (t *Table[C]) run(ctx context.Context) error {
	c := &t.cfg
	base := append([]kgo.Opt{kgo.SeedBrokers(c.brokers...), kgo.WithLogger(kslog.New(c.logger))}, c.kafkaOpts...)
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("configtopic: admin client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	var errs []error
	for _, name := range c.topics {
		// One topic at a time: a Table may read topics of different
		// partition counts.
		if _, _, err := topics.Describe(ctx, adm, "config", []string{name}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	parts, err := t.targets(ctx, adm)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := t.bootstrap(ctx, admCl, parts); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	t.markReady()

	// The live consumer starts where the bootstrap stopped: at the last
	// stable offsets listed before it. Partitions added later are read
	// from their start.
	start := map[string]map[int32]kgo.Offset{}
	for _, p := range parts {
		if start[p.topic] == nil {
			start[p.topic] = map[int32]kgo.Offset{}
		}
		start[p.topic][p.partition] = kgo.NewOffset().At(p.end)
	}
	cl, err := kgo.NewClient(append(slices.Clone(base),
		kgo.ConsumePartitions(start),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)...)
	if err != nil {
		return fmt.Errorf("configtopic: consumer: %w", err)
	}
	defer cl.Close()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go t.watchPartitions(watchCtx, adm, cl, parts)

	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("configtopic: fetching topic %s partition %d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var changes []change[C]
		var rerr error
		fs.EachRecord(func(r *kgo.Record) {
			if rerr != nil || r.Attrs.IsControl() {
				return
			}
			if r.Key == nil {
				rerr = errNoKey(r)
				return
			}
			if r.Value == nil {
				changes = append(changes, change[C]{key: string(r.Key), del: true})
				return
			}
			rec := toRecord(r)
			v, err := t.decode(ctx, rec)
			if err != nil {
				rerr = &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Err: err}
				return
			}
			changes = append(changes, change[C]{key: string(r.Key), entry: Entry[C]{Record: *rec, Config: v}})
		})
		// The records before a bad one are applied: the Table keeps
		// what it had before the bad record.
		t.apply(changes)
		if rerr != nil {
			if ctx.Err() != nil {
				return nil
			}
			return rerr
		}
	}
}

type change[C any] struct {
	key   string
	entry Entry[C]
	del   bool
}

// apply installs changes in order and signals Changed.
func (t *Table[C]) apply(changes []change[C]) {
	if len(changes) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ch := range changes {
		if ch.del {
			delete(t.entries, ch.key)
		} else {
			t.entries[ch.key] = ch.entry
		}
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

func errNoKey(r *kgo.Record) error {
	return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Err: errors.New("config record has no key")}
}

// bootstrap reads every partition from its start up to the end listed in
// parts, keeps the last record of every key, and only then decodes and
// enriches the values that survive: a value replaced later in the log is
// never decoded (so a bad value that was replaced cannot stop the Table)
// and Enrich runs once per live key.
func (t *Table[C]) bootstrap(ctx context.Context, cl *kgo.Client, parts []partRange) error {
	type latest struct {
		order int // of the partition in parts, for a deterministic merge
		rec   *kgo.Record
	}
	var (
		mu   sync.Mutex
		last = map[string]latest{}
	)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, p := range parts {
		if p.end <= p.start {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			// The last record per key of this partition, in offset order.
			mine := map[string]*kgo.Record{}
			var superseded []*kgo.Record
			err := readRange(ctx, cl, p.topic, p.partition, p.start, p.end, func(r *kgo.Record) error {
				t.stats.bootstrapRecords.Add(1)
				if r.Key == nil {
					return errNoKey(r)
				}
				if prev := mine[string(r.Key)]; prev != nil {
					superseded = append(superseded, prev)
				}
				mine[string(r.Key)] = r
				return nil
			})
			if err != nil {
				cancel(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for k, r := range mine {
				// Across topics the later partition in parts wins;
				// the order between topics is not defined.
				if prev, ok := last[k]; ok {
					if prev.order > i {
						superseded = append(superseded, r)
						continue
					}
					superseded = append(superseded, prev.rec)
				}
				last[k] = latest{order: i, rec: r}
			}
			for _, r := range superseded {
				if r.Value == nil {
					continue
				}
				t.stats.superseded.Add(1)
				t.cfg.logger.Debug("config record superseded during bootstrap, not decoded",
					"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "key", string(r.Key))
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}

	// Decode and enrich the survivors in a stable order (topic order of
	// Topics, then partition, then offset), so the first bad one is the
	// one reported.
	recs := make([]latest, 0, len(last))
	for _, l := range last {
		if l.rec.Value != nil {
			recs = append(recs, l)
		}
	}
	slices.SortFunc(recs, func(a, b latest) int {
		if a.order != b.order {
			return a.order - b.order
		}
		return int(a.rec.Offset - b.rec.Offset)
	})
	changes := make([]change[C], 0, len(recs))
	for _, l := range recs {
		rec := toRecord(l.rec)
		v, err := t.decode(ctx, rec)
		if err != nil {
			return &RecordError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Err: err}
		}
		changes = append(changes, change[C]{key: string(rec.Key), entry: Entry[C]{Record: *rec, Config: v}})
	}
	t.apply(changes)
	return nil
}

// watchPartitions adds partitions created in the config topics after Run
// started to the live consumer, read from their start.
func (t *Table[C]) watchPartitions(ctx context.Context, adm *kadm.Client, cl *kgo.Client, parts []partRange) {
	known := map[string]map[int32]bool{}
	for _, p := range parts {
		if known[p.topic] == nil {
			known[p.topic] = map[int32]bool{}
		}
		known[p.topic][p.partition] = true
	}
	tick := time.NewTicker(t.cfg.partitionCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		md, err := adm.Metadata(ctx, t.cfg.topics...)
		if err != nil {
			continue // the next tick tries again
		}
		add := map[string]map[int32]kgo.Offset{}
		for name, td := range md.Topics {
			if known[name] == nil || td.Err != nil {
				continue
			}
			for p := range td.Partitions {
				if !known[name][p] {
					known[name][p] = true
					if add[name] == nil {
						add[name] = map[int32]kgo.Offset{}
					}
					add[name][p] = kgo.NewOffset().AtStart()
				}
			}
		}
		if len(add) > 0 {
			t.cfg.logger.Info("config topic partitions added", "partitions", add)
			cl.AddConsumePartitions(add)
		}
	}
}

func (t *Table[C]) markReady() {
	t.readyOnce.Do(func() {
		t.cfg.logger.Info("config table ready", "topics", t.cfg.topics, "configs", t.Len(),
			"records", t.stats.bootstrapRecords.Load(), "superseded", t.stats.superseded.Load())
		close(t.ready)
	})
}

func (t *Table[C]) decode(ctx context.Context, rec *Record) (C, error) {
	v, err := t.decoder.Decode(rec.Value)
	if err != nil {
		return v, fmt.Errorf("decoding: %w", err)
	}
	if t.enrich != nil {
		if v, err = t.enrich(ctx, rec, v); err != nil {
			return v, fmt.Errorf("enriching: %w", err)
		}
	}
	return v, nil
}

// partRange is one config partition and the offsets the bootstrap reads:
// from its log start up to its last stable offset listed when Run started.
type partRange struct {
	topic      string
	partition  int32
	start, end int64
}

// targets lists every partition of the config topics with its log start
// and last stable offset, in the order of Topics, then by partition.
func (t *Table[C]) targets(ctx context.Context, adm *kadm.Client) ([]partRange, error) {
	starts, err := adm.ListStartOffsets(ctx, t.cfg.topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("configtopic: start offsets of %v: %w", t.cfg.topics, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, t.cfg.topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("configtopic: last stable offsets of %v: %w", t.cfg.topics, err)
	}
	var out []partRange
	for _, name := range t.cfg.topics {
		var ps []partRange
		for p, o := range ends[name] {
			s, _ := starts.Lookup(name, p)
			ps = append(ps, partRange{topic: name, partition: p, start: s.Offset, end: o.Offset})
		}
		slices.SortFunc(ps, func(a, b partRange) int { return int(a.partition - b.partition) })
		out = append(out, ps...)
	}
	return out, nil
}

func toRecord(r *kgo.Record) *Record {
	rec := &Record{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
	}
	if len(r.Headers) > 0 {
		rec.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return rec
}
