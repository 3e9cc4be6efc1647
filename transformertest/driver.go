package transformertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Input is one record to feed to a Driver. Its offset is assigned by the
// Driver: the next offset of its topic and partition.
type Input struct {
	Topic     string
	Partition int32
	Key       []byte
	Value     []byte
	Headers   []transformer.Header
	// Timestamp is passed through as is; the zero time when unset.
	Timestamp time.Time
}

// StringInput returns an Input with a string key and value. An empty key is
// a nil key.
func StringInput(topic string, partition int32, key, value string) Input {
	in := Input{Topic: topic, Partition: partition, Value: []byte(value)}
	if key != "" {
		in.Key = []byte(key)
	}
	return in
}

// Write is one changelog write: a put of Value to the state of Key in task
// Partition, or a delete (a tombstone) when Delete is set.
type Write struct {
	Partition int32
	Key       []byte
	Value     []byte
	Delete    bool
}

// Batch is what one committed batch produced: what the runtime would have
// committed in the transactions of its tasks.
type Batch struct {
	// Records is the number of input records of the batch.
	Records int
	// Outputs in commit order: by partition, then by state key in order of
	// the key's first record, then in emit order. Each has the timestamp
	// and headers the runtime produces it with and the partition it goes
	// to (Output.Partition; see Driver.toOutput's rules in Process).
	Outputs []transformer.Output
	// Changelog holds the state writes, deduplicated to the last write
	// per key, in the order of Outputs. A key that had no state before the
	// batch and has none after it (deleted) gets no write.
	Changelog []Write
	// Offsets are the committed offsets (the next offset to consume) of
	// the batch's topics and partitions.
	Offsets map[string]map[int32]int64

	// The fields below are for a stage with stores or timers.

	// StoreWrites are the writes to named stores, the last per store and
	// key, by partition.
	StoreWrites []StoreWrite
	// Fired are the timers of the stage (Emitter.SetTimer) that fired, by
	// partition, then in the order of their callbacks' outputs.
	Fired []Fired
	// Expired are the keys whose state (Store "") or store key (Store:
	// the store's name) expired by their TTL, in the same order.
	Expired []Expired
	// MoreDue reports that due timers were left for later batches
	// (MaxTimers): Tick again to fire them, as the runtime does while
	// timers are due (ticks at least 10ms apart).
	MoreDue bool
}

// StoreWrite is one write to a named store: a put of Value to Key, or a
// delete (a tombstone on the store's changelog) when Delete is set.
type StoreWrite struct {
	Partition int32
	Store     string
	Key       []byte
	Value     []byte
	Delete    bool
}

// Fired is a timer that fired in task Partition.
type Fired struct {
	Partition int32
	transformer.Timer
}

// Expired is a key of task Partition that expired: its state (Store is
// "", transformer.StateTTL) or its entry in the named store Store
// (transformer.StoreTTL).
type Expired struct {
	Partition int32
	Store     string
	Key       []byte
}

// Opt configures a Driver.
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	inputs      []string
	concurrency int
	partitions  map[string]int32
	maxTimers   int
}

// InputTopics sets the input topics, in the order the runtime's
// runner.InputTopics has them: records of one state key run in this topic
// order, then offset order, and an Input of any other topic is an error. By
// default every topic is accepted and ordered by its first appearance.
func InputTopics(topics ...string) Opt {
	return opt(func(c *cfg) { c.inputs = slices.Clone(topics) })
}

// Concurrency bounds how many state-key buckets run their transforms at the
// same time, like runner.Concurrency. Default 64; 1 runs them one by one.
func Concurrency(n int) Opt { return opt(func(c *cfg) { c.concurrency = n }) }

// MaxTimers bounds how many due timers of keys without records one batch
// (Process, Tick) of a task partition fires, as the runtime's bound does:
// the rest, the latest due, fire in later batches, and the Batch reports
// them (MoreDue). The keys of a batch's records keep all their due
// timers. Default: runner.MaxTimersPerBatch's default (10000); negative:
// no bound.
func MaxTimers(n int) Opt { return opt(func(c *cfg) { c.maxTimers = n }) }

// OutputPartitions sets the partition count of an output topic, over
// which the Driver partitions its outputs as the runtime does (see
// Driver.Process). The default is the count a declared output asks to be
// created with (transformer.CreateTopic), else 1. n must be positive.
func OutputPartitions(topic string, n int32) Opt {
	return opt(func(c *cfg) {
		if c.partitions == nil {
			c.partitions = map[string]int32{}
		}
		c.partitions[topic] = n
	})
}

// Driver runs a transformer over batches of input records without Kafka.
// Build it with New.
type Driver struct {
	user     Stage
	tr       stage.Transformer
	stateful bool
	cfg      cfg
	// parts are the partition counts of output topics (OutputPartitions,
	// else the declared ones); partitioners their partitioners.
	parts        map[string]int32
	own          map[string]int32 // the counts of parts given to New
	partitioners map[string]func(key []byte, partitions int32) int32

	mu       sync.Mutex
	topicIdx map[string]int
	next     map[string]map[int32]int64
	state    map[int32]map[string][]byte
	outputs  []transformer.Output
	batches  []*Batch

	// A stage with stores or timers (sp not nil): its named stores
	// (names, and per partition the contents of each), timers and stream
	// time per partition, and the clock (zero: the machine's).
	sp     process.Stores
	names  []string
	named  map[int32][]map[string][]byte
	timers map[int32]map[timerID]process.Timer
	// stamps are the stamps kept with the default state (Result.Stamp).
	stamps map[int32]map[string][]byte
	stream map[int32]int64
	now    time.Time

	// codecs are the stage's codecs that implement flechtwerk.Lifecycle
	// (state, declared outputs); opened once opened, none after closed.
	codecs []flechtwerk.Lifecycle
	opened []flechtwerk.Lifecycle
	closed bool
}

// Stage is what a Driver runs: a *transformer.Stage (built with
// transformer.From, transformer.New, transformer.Stateless or their other
// forms).
type Stage interface{ Validate() error }

// New returns a Driver for t, a *transformer.Stage. A transformer
// that failed its own validation (a nil function, a codec of the wrong
// type), a value of another type or an invalid option is reported as a
// *flechtwerk.ConfigError, as runner.NewTransformer reports it; every problem at once.
func New(t Stage, opts ...Opt) (*Driver, error) {
	c := cfg{concurrency: 64}
	for _, o := range opts {
		o.apply(&c)
	}
	var errs []error
	tr, ok := stage.TransformerOf(t)
	switch {
	case t == nil:
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "transformer", "transformer is nil"))
	case !ok:
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "transformer",
			"%T is not a *transformer.Stage", t))
	default:
		if err := tr.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.concurrency <= 0 {
		errs = append(errs, fmt.Errorf("transformertest: Concurrency must be positive, is %d", c.concurrency))
	}
	seen := map[string]bool{}
	for _, t := range c.inputs {
		if t == "" || seen[t] {
			errs = append(errs, fmt.Errorf("transformertest: InputTopics: empty or repeated topic %q", t))
		}
		seen[t] = true
	}
	for topic, n := range c.partitions {
		if topic == "" || n <= 0 {
			errs = append(errs, fmt.Errorf("transformertest: OutputPartitions: topic %q: partition count %d must be positive", topic, n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	parts := map[string]int32{}
	var partitioners map[string]func([]byte, int32) int32
	if o, ok := tr.(stage.Outputs); ok {
		for _, s := range o.Outputs() {
			if s.Create {
				parts[s.Topic] = s.Partitions
			}
		}
		partitioners = o.Partitioners()
	}
	var codecs []flechtwerk.Lifecycle
	if o, ok := tr.(stage.Outputs); ok {
		for _, c := range o.Codecs() {
			if l, ok := c.(flechtwerk.Lifecycle); ok {
				codecs = append(codecs, l)
			}
		}
	}
	maps.Copy(parts, c.partitions)
	d := &Driver{
		parts:        parts,
		own:          maps.Clone(parts),
		partitioners: partitioners,
		codecs:       codecs,
		user:         t,
		tr:           tr,
		stateful:     tr.Stateful(),
		cfg:          c,
		topicIdx:     map[string]int{},
		next:         map[string]map[int32]int64{},
		state:        map[int32]map[string][]byte{},
	}
	for i, t := range c.inputs {
		d.topicIdx[t] = i
	}
	if sp, ok := tr.(process.Stores); ok {
		d.sp = sp
		for _, s := range sp.Stores() {
			d.names = append(d.names, s.Name)
		}
		d.named = map[int32][]map[string][]byte{}
		d.timers = map[int32]map[timerID]process.Timer{}
		d.stream = map[int32]int64{}
	}
	return d, nil
}

// Process runs in as one batch and, when every transform succeeded, commits
// it: outputs, state and offsets advance together, and the Batch is
// returned. Otherwise it returns the error (a *transformer.ProcessError for
// a transform error, a panic or an empty state key) and changes nothing.
// ctx is passed to the transforms.
//
// The records of each partition run as one task's batch does in the
// runtime: through the same function (internal/batch), the partitions
// concurrently, sharing the Concurrency bound.
//
// Outputs are partitioned as the runtime's producer does: to their
// explicit partition (Output.ToPartition), else their topic's partitioner
// (transformer.Partitioner, transformer.PartitionBy), else
// transformer.Murmur2 of the key (partition 0 for a nil key, where the
// runtime spreads them), over the topic's partition count
// (OutputPartitions). A partition out of range fails the batch with an
// *flechtwerk.OutputError and changes nothing, as it aborts the runtime's
// transaction.
//
// The first Process opens the codecs the stage encodes with (its state
// codec, its declared outputs' key and value codecs) that implement
// flechtwerk.Lifecycle, as Run opens them before the first record, with
// ctx: an Open that fails (or panics) is returned as an error matching
// flechtwerk.ErrStageOpen naming the codec, the codecs opened before it
// are closed again, and the next Process tries again. Close closes them.
// Process after Close is an error.
func (d *Driver) Process(ctx context.Context, in ...Input) (*Batch, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("transformertest: Process after Close")
	}
	if err := d.open(ctx); err != nil {
		return nil, err
	}
	if len(in) == 0 {
		return &Batch{Offsets: map[string]map[int32]int64{}}, nil // an empty poll commits nothing
	}

	// Assign offsets and topic order on copies, kept only on commit.
	topicIdx := maps.Clone(d.topicIdx)
	next := map[string]map[int32]int64{}
	byPart := map[int32][]*kgo.Record{}
	for i, r := range in {
		if r.Topic == "" {
			return nil, fmt.Errorf("transformertest: input %d has no topic", i)
		}
		if r.Partition < 0 {
			return nil, fmt.Errorf("transformertest: input %d has partition %d", i, r.Partition)
		}
		if _, ok := topicIdx[r.Topic]; !ok {
			if len(d.cfg.inputs) > 0 {
				return nil, fmt.Errorf("transformertest: input %d is of topic %q, not one of the input topics %q", i, r.Topic, d.cfg.inputs)
			}
			topicIdx[r.Topic] = len(topicIdx)
		}
		if next[r.Topic] == nil {
			next[r.Topic] = map[int32]int64{}
		}
		off, ok := next[r.Topic][r.Partition]
		if !ok {
			off = d.next[r.Topic][r.Partition]
		}
		next[r.Topic][r.Partition] = off + 1
		rec := &kgo.Record{
			Topic: r.Topic, Partition: r.Partition, Offset: off,
			Key: clone(r.Key), Value: clone(r.Value), Timestamp: r.Timestamp,
		}
		for _, h := range r.Headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: clone(h.Value)})
		}
		byPart[r.Partition] = append(byPart[r.Partition], rec)
	}

	return d.run(ctx, byPart, slices.Sorted(maps.Keys(byPart)), topicIdx, next, len(in))
}

// run runs one task's batch per partition of parts (its records in
// byPart), concurrently, bounded together, and commits them all when all
// succeeded; d.mu is held.
func (d *Driver) run(ctx context.Context, byPart map[int32][]*kgo.Record, parts []int32, topicIdx map[string]int, next map[string]map[int32]int64, records int) (*Batch, error) {
	now := d.now
	if now.IsZero() {
		now = time.Now()
	}
	results := make([]*batch.Result, len(parts))
	errs := make([]error, len(parts))
	sem := make(chan struct{}, d.cfg.concurrency)
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			params := batch.Params{
				Transformer: d.tr,
				Partition:   p,
				TopicOrder:  topicIdx,
				State:       d.stateOf(p),
				Sem:         sem,
				Name:        "transformertest",
				MaxTimers:   d.cfg.maxTimers,
			}
			if d.sp != nil {
				v := d.viewOf(p, now)
				params.View = v
				if d.sp.Timers() {
					params.Due = v.due
				}
			}
			results[i], errs[i] = batch.Run(ctx, params, byPart[p])
		}()
	}
	wg.Wait()
	// The first error of each partition, like one task each.
	switch errs = slices.DeleteFunc(errs, func(e error) bool { return e == nil }); len(errs) {
	case 0:
	case 1:
		return nil, errs[0]
	default:
		return nil, errors.Join(errs...)
	}

	// Partition the outputs as the producer would: an output the
	// runtime's transaction would fail on fails the batch.
	b := &Batch{Records: records, Offsets: next}
	for _, res := range results {
		for _, o := range res.Outputs {
			out, err := d.toOutput(o)
			if err != nil {
				return nil, err
			}
			b.Outputs = append(b.Outputs, out)
		}
	}

	// Commit.
	for i, res := range results {
		p := parts[i]
		for _, w := range res.Writes {
			b.Changelog = append(b.Changelog, Write{Partition: p, Key: clone(w.Key), Value: clone(w.Value), Delete: w.Delete})
			switch {
			case len(w.Stamp) > 0 && !w.Delete:
				if d.stamps == nil {
					d.stamps = map[int32]map[string][]byte{}
				}
				if d.stamps[p] == nil {
					d.stamps[p] = map[string][]byte{}
				}
				d.stamps[p][string(w.Key)] = clone(w.Stamp)
			case d.stamps != nil:
				delete(d.stamps[p], string(w.Key))
			}
		}
	}
	if d.sp != nil {
		for i, res := range results {
			d.commitStores(b, parts[i], res)
		}
	}
	for _, w := range b.Changelog {
		st := d.state[w.Partition]
		if st == nil {
			st = map[string][]byte{}
			d.state[w.Partition] = st
		}
		if w.Delete {
			delete(st, string(w.Key))
		} else {
			st[string(w.Key)] = w.Value
		}
	}
	for topic, ps := range next {
		if d.next[topic] == nil {
			d.next[topic] = map[int32]int64{}
		}
		maps.Copy(d.next[topic], ps)
	}
	d.topicIdx = topicIdx
	d.outputs = append(d.outputs, b.Outputs...)
	d.batches = append(d.batches, b)
	return b, nil
}

// stateOf reads the committed state of partition p, as a task's store does:
// a copy, so the transform may keep or change it without touching the
// committed state. Buckets read concurrently; the map is written only at
// commit, under d.mu, which Process holds.
func (d *Driver) stateOf(p int32) func(key []byte) ([]byte, bool, error) {
	st := d.state[p]
	return func(key []byte) ([]byte, bool, error) {
		v, ok := st[string(key)]
		return clone(v), ok, nil
	}
}

// Outputs returns every committed output so far, in commit order.
func (d *Driver) Outputs() []transformer.Output {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.outputs)
}

// Batches returns the committed batches so far, oldest first.
func (d *Driver) Batches() []*Batch {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.batches)
}

// Changelog returns every changelog write so far, in commit order: what the
// changelog topic holds before compaction.
func (d *Driver) Changelog() []Write {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Write
	for _, b := range d.batches {
		out = append(out, b.Changelog...)
	}
	return out
}

// Committed returns the committed offset of a topic and partition: the
// offset the next Input there gets (0 before the first).
func (d *Driver) Committed(topic string, partition int32) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.next[topic][partition]
}

// RawState returns a copy of the encoded state of key in task partition, and
// whether there is one.
func (d *Driver) RawState(partition int32, key []byte) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.state[partition][string(key)]
	return clone(v), ok
}

// StateKeys returns the state keys of task partition in byte order, as the
// task's store iterates them.
func (d *Driver) StateKeys(partition int32) [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	keys := make([][]byte, 0, len(d.state[partition]))
	for k := range d.state[partition] {
		keys = append(keys, []byte(k))
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys
}

// State returns the decoded state of key in task partition and whether there
// is one, decoded with the transformer's codec (transformer.StateCodec, else
// transformer.JSON). S must be the transformer's state type.
func State[S any](d *Driver, partition int32, key []byte) (S, bool, error) {
	var zero S
	raw, ok := d.RawState(partition, key)
	if !ok {
		return zero, false, nil
	}
	t, ok := d.user.(interface{ Codec() transformer.Codec[S] })
	if !ok || t.Codec() == nil {
		return zero, true, fmt.Errorf("transformertest: State[%T]: the transformer's state is not of type %T", zero, zero)
	}
	s, err := t.Codec().Decode(raw)
	if err != nil {
		return zero, true, fmt.Errorf("transformertest: decoding state of key %q in partition %d as %T: %w", key, partition, zero, err)
	}
	return s, true, nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// toOutput copies an output as the runtime's produce serializes it at
// commit (later changes to the transform's buffers do not reach it), with
// the partition the producer would send it to: its explicit one, else its
// topic's partitioner's choice, else Murmur2 of its key (partition 0 for
// a nil key), among the topic's partitions (see OutputPartitions). A
// partition out of range is an *flechtwerk.OutputError, as in the
// runtime.
func (d *Driver) toOutput(r *kgo.Record) (transformer.Output, error) {
	o := transformer.Output{Topic: r.Topic, Key: clone(r.Key), Value: clone(r.Value), Timestamp: r.Timestamp}
	if r.Headers != nil {
		o.Headers = make([]transformer.Header, len(r.Headers))
		for i, h := range r.Headers {
			o.Headers[i] = transformer.Header{Key: h.Key, Value: clone(h.Value)}
		}
	}
	n, ok := d.parts[r.Topic]
	if !ok {
		n = 1
	}
	p := r.Partition
	switch fn := d.partitioners[r.Topic]; {
	case p >= 0:
	case fn != nil:
		var err error
		if p, err = partitionOf(fn, r.Key, n); err != nil {
			return o, &flechtwerk.OutputError{Code: flechtwerk.CodeOutputPartition, Topic: r.Topic, Partition: -1, Partitions: n, Err: err}
		}
	case r.Key != nil:
		p = transformer.Murmur2(r.Key, n)
	default:
		p = 0
	}
	if p < 0 || p >= n {
		return o, &flechtwerk.OutputError{Code: flechtwerk.CodeOutputPartition, Topic: r.Topic, Partition: p, Partitions: n}
	}
	return o.ToPartition(p), nil
}

// open opens the codecs once (see Process); d.mu is held.
func (d *Driver) open(ctx context.Context) error {
	if len(d.opened) == len(d.codecs) {
		return nil
	}
	for _, l := range d.codecs {
		if err := call(func() error { return l.Open(ctx) }); err != nil {
			err = fmt.Errorf("transformertest: %w: opening codec %T: %w", flechtwerk.ErrStageOpen, l, err)
			if cerr := d.closeOpened(context.WithoutCancel(ctx)); cerr != nil {
				err = errors.Join(err, cerr)
			}
			return err
		}
		d.opened = append(d.opened, l)
	}
	return nil
}

// closeOpened closes the opened codecs in reverse order and joins their
// errors; d.mu is held.
func (d *Driver) closeOpened(ctx context.Context) error {
	var errs []error
	for i := len(d.opened) - 1; i >= 0; i-- {
		l := d.opened[i]
		if err := call(func() error { return l.Close(ctx) }); err != nil {
			errs = append(errs, fmt.Errorf("transformertest: closing codec %T: %w", l, err))
		}
	}
	d.opened = nil
	return errors.Join(errs...)
}

// Close closes the codecs the first Process opened (see Process), in
// reverse order, as Run closes them after the last record, and returns
// their errors joined. The Driver's committed outputs and state stay
// readable; Process fails from now on. A second Close is a no-op. In a
// test: t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) }).
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	return d.closeOpened(ctx)
}

// call runs fn, recovering a panic into a *flechtwerk.PanicError.
func call(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return fn()
}

// partitionOf calls a partitioner, recovering a panic into a
// *flechtwerk.PanicError, as the runtime's producer does.
func partitionOf(fn func([]byte, int32) int32, key []byte, n int32) (p int32, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return fn(key, n), nil
}

// TypedOutput is an output of a declared output topic, decoded (Outputs).
type TypedOutput[K, V any] struct {
	Key       K
	Value     V
	Partition int32
	Timestamp time.Time
	Headers   []transformer.Header
}

// Outputs returns the committed outputs of topic so far, in commit order,
// their keys and values decoded with its codecs; a key or value that does
// not decode is an error naming the output.
func Outputs[K, V any](d *Driver, topic *transformer.OutputTopic[K, V]) ([]TypedOutput[K, V], error) {
	var outs []TypedOutput[K, V]
	for i, o := range d.Outputs() {
		if o.Topic != topic.Topic() {
			continue
		}
		k, v, err := topic.Decode(o)
		if err != nil {
			return nil, fmt.Errorf("transformertest: output %d: %w", i, err)
		}
		p, _ := o.Partition()
		outs = append(outs, TypedOutput[K, V]{Key: k, Value: v, Partition: p, Timestamp: o.Timestamp, Headers: o.Headers})
	}
	return outs, nil
}

// setPartitions sets the partition counts of the topics in parts that the
// Driver has no count of its own for (see Pipeline.Partitions); a count
// of its own that differs is an error.
func (d *Driver) setPartitions(parts map[string]int32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, topic := range slices.Sorted(maps.Keys(parts)) {
		n := parts[topic]
		if own, ok := d.own[topic]; ok {
			if own != n {
				errs = append(errs, fmt.Errorf("the driver partitions topic %q over %d partitions, the pipeline over %d", topic, own, n))
			}
			continue
		}
		d.parts[topic] = n
	}
	return errors.Join(errs...)
}
