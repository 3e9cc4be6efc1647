package transformertest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/flechtwerk/flechtwerk/task"
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
	// the key's first record, then in emit order.
	Outputs []transformer.Output
	// Changelog holds the state writes, deduplicated to the last write
	// per key, in the order of Outputs.
	Changelog []Write
	// Offsets are the committed offsets (the next offset to consume) of
	// the batch's topics and partitions.
	Offsets map[string]map[int32]int64
}

// Opt configures a Driver.
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	inputs      []string
	concurrency int
	codec       any
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

// Codec sets the codec that State decodes with. By default State uses the
// processor's own codec (a *transformer.Transformer's), else
// transformer.JSON; set it only for a custom processor with another codec.
func Codec[S any](c transformer.StateCodec[S]) Opt {
	return opt(func(cf *cfg) { cf.codec = c })
}

// Driver runs a transformer (any task.Processor) over batches of input
// records without Kafka. Build it with New.
type Driver struct {
	proc     task.Processor
	stateful bool
	cfg      cfg

	mu       sync.Mutex
	topicIdx map[string]int
	next     map[string]map[int32]int64
	state    map[int32]map[string][]byte
	outputs  []transformer.Output
	batches  []*Batch
}

// New returns a Driver for proc, typically a *transformer.Transformer. A
// transformer that failed its own validation (a nil function, a codec of the
// wrong type) or an invalid option is reported as a *flechtwerk.ConfigError,
// as runner.New reports it.
func New(proc task.Processor, opts ...Opt) (*Driver, error) {
	c := cfg{concurrency: 64}
	for _, o := range opts {
		o.apply(&c)
	}
	if proc == nil {
		return nil, errors.New("transformertest: processor is nil")
	}
	var errs []error
	if v, ok := proc.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
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
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d := &Driver{
		proc:     proc,
		stateful: proc.Stateful(),
		cfg:      c,
		topicIdx: map[string]int{},
		next:     map[string]map[int32]int64{},
		state:    map[int32]map[string][]byte{},
	}
	for i, t := range c.inputs {
		d.topicIdx[t] = i
	}
	return d, nil
}

// bucket is the records of one state key of one partition in a batch.
type bucket struct {
	key  []byte
	recs []*transformer.Record
	outs []transformer.Output
	op   transformer.StateOp
	val  []byte
	err  error
}

// Process runs in as one batch and, when every transform succeeded, commits
// it: outputs, state and offsets advance together, and the Batch is
// returned. Otherwise it returns the error (a *task.ProcessError for a
// transform error or an empty state key) and changes nothing. ctx is passed
// to the transforms.
func (d *Driver) Process(ctx context.Context, in ...Input) (*Batch, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(in) == 0 {
		return &Batch{Offsets: map[string]map[int32]int64{}}, nil // an empty poll commits nothing
	}

	// Assign offsets and topic order on copies, kept only on commit.
	topicIdx := maps.Clone(d.topicIdx)
	next := map[string]map[int32]int64{}
	byPart := map[int32][]*transformer.Record{}
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
		byPart[r.Partition] = append(byPart[r.Partition], &transformer.Record{
			Topic: r.Topic, Partition: r.Partition, Offset: off,
			Key: clone(r.Key), Value: clone(r.Value),
			Headers: cloneHeaders(r.Headers), Timestamp: r.Timestamp,
		})
	}

	// Bucket like task.Process: per partition, sort by input-topic order
	// then offset, then group by state key in order of first appearance.
	parts := slices.Sorted(maps.Keys(byPart))
	var all [][]*bucket
	for _, p := range parts {
		recs := byPart[p]
		slices.SortStableFunc(recs, func(x, y *transformer.Record) int {
			if c := cmp.Compare(topicIdx[x.Topic], topicIdx[y.Topic]); c != 0 {
				return c
			}
			return cmp.Compare(x.Offset, y.Offset)
		})
		var buckets []*bucket
		byKey := map[string]*bucket{}
		for _, r := range recs {
			key := d.proc.StateKey(r)
			if d.stateful && len(key) == 0 {
				return nil, &task.ProcessError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key,
					Err: errors.New("record has an empty state key; a stateful transformer needs one (set transformer.StateKey)")}
			}
			bk := byKey[string(key)]
			if bk == nil {
				bk = &bucket{key: clone(key)}
				byKey[string(key)] = bk
				buckets = append(buckets, bk)
			}
			bk.recs = append(bk.recs, r)
		}
		all = append(all, buckets)
	}

	// Run the buckets concurrently, bounded.
	sem := make(chan struct{}, d.cfg.concurrency)
	var wg sync.WaitGroup
	var cerr error
run:
	for i, buckets := range all {
		for _, bk := range buckets {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				cerr = ctx.Err()
				break run
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				d.runBucket(ctx, parts[i], bk)
			}()
		}
	}
	wg.Wait()
	if cerr != nil {
		return nil, fmt.Errorf("transformertest: %w", cerr)
	}

	// The first error of each partition, like one task each.
	var errs []error
	for _, buckets := range all {
		for _, bk := range buckets {
			if bk.err != nil {
				errs = append(errs, bk.err)
				break
			}
		}
	}
	switch len(errs) {
	case 0:
	case 1:
		return nil, errs[0]
	default:
		return nil, errors.Join(errs...)
	}

	// Commit.
	b := &Batch{Records: len(in), Offsets: next}
	for i, buckets := range all {
		p := parts[i]
		for _, bk := range buckets {
			for _, o := range bk.outs {
				b.Outputs = append(b.Outputs, cloneOutput(o))
			}
			switch bk.op {
			case transformer.StatePut:
				b.Changelog = append(b.Changelog, Write{Partition: p, Key: bk.key, Value: clone(bk.val)})
			case transformer.StateDelete:
				b.Changelog = append(b.Changelog, Write{Partition: p, Key: bk.key, Delete: true})
			}
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

// runBucket mirrors the task's: read the state once, then thread it through
// the bucket's records.
func (d *Driver) runBucket(ctx context.Context, p int32, bk *bucket) {
	var (
		cur   []byte
		found bool
	)
	if d.stateful {
		// A copy, as the store returns one: the processor may keep or
		// change it without touching the committed state.
		var v []byte
		v, found = d.state[p][string(bk.key)]
		cur = clone(v)
	}
	for _, r := range bk.recs {
		res, err := d.proc.Process(ctx, r, cur, found)
		if err != nil {
			bk.err = &task.ProcessError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Err: err}
			return
		}
		bk.outs = append(bk.outs, res.Outputs...)
		if !d.stateful {
			continue
		}
		switch res.Op {
		case transformer.StatePut:
			cur, found = res.State, true
			bk.op, bk.val = transformer.StatePut, res.State
		case transformer.StateDelete:
			cur, found = nil, false
			bk.op, bk.val = transformer.StateDelete, nil
		}
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
// is one. It decodes with the codec given by the Codec option, else the
// processor's own (when it has a Codec method), else transformer.JSON, the
// default of transformer.New.
func State[S any](d *Driver, partition int32, key []byte) (S, bool, error) {
	var zero S
	raw, ok := d.RawState(partition, key)
	if !ok {
		return zero, false, nil
	}
	var codec transformer.StateCodec[S]
	switch c := d.cfg.codec.(type) {
	case nil:
		if p, ok := d.proc.(interface {
			Codec() transformer.StateCodec[S]
		}); ok {
			codec = p.Codec()
		} else {
			codec = transformer.JSON[S]()
		}
	case transformer.StateCodec[S]:
		codec = c
	default:
		return zero, true, fmt.Errorf("transformertest: the Codec option's %T does not decode %T", c, zero)
	}
	s, err := codec.Decode(raw)
	if err != nil {
		return zero, true, fmt.Errorf("transformertest: decoding state of key %q in partition %d as %T (a transformer built with transformer.Codec needs the same codec in transformertest.Codec): %w",
			key, partition, zero, err)
	}
	return s, true, nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

func cloneHeaders(hs []transformer.Header) []transformer.Header {
	if hs == nil {
		return nil
	}
	out := make([]transformer.Header, len(hs))
	for i, h := range hs {
		out[i] = transformer.Header{Key: h.Key, Value: clone(h.Value)}
	}
	return out
}

// cloneOutput copies an output as the runtime's produce serializes it at
// commit: later changes to the transform's buffers do not reach it.
func cloneOutput(o transformer.Output) transformer.Output {
	return transformer.Output{Topic: o.Topic, Key: clone(o.Key), Value: clone(o.Value), Headers: cloneHeaders(o.Headers)}
}
