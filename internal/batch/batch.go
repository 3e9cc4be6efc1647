package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Params is what one run of a batch needs besides its records.
type Params struct {
	// Transformer is the stage that runs.
	Transformer stage.Transformer
	// Partition is the partition every record must be of.
	Partition int32
	// TopicOrder ranks the input topics: records run in this order, then
	// offset order. A topic it does not hold ranks first.
	TopicOrder map[string]int
	// State reads the committed state of a key (a stateful transformer
	// only): its value, whether there is one, and an error that ends the
	// batch. It is called once per bucket, concurrently across buckets; the
	// value must be the caller's own copy.
	State func(key []byte) ([]byte, bool, error)
	// Sem bounds how many buckets run at the same time: one slot each.
	Sem chan struct{}
	// Name prefixes errors that name no record, e.g. "task 3".
	Name string
}

// Result is a processed, not yet committed, batch.
type Result struct {
	// Outputs in commit order: by state key in order of the key's first
	// record, then in emit order.
	Outputs []*kgo.Record
	// Writes hold the last state write per key, in the order of Outputs.
	Writes []store.Write
	// Offsets are the next offsets to consume per input topic (control
	// records included).
	Offsets map[string]int64
	// Records is how many input records (not control records) it held.
	Records int
}

// bucket is the records of one state key.
type bucket struct {
	key  []byte
	recs []*kgo.Record
	in   []stage.Input
	outs []*kgo.Record
	// final state of the key
	op    stage.Op
	state []byte
	err   error
}

// Run runs the transformer over recs, all of p.Partition. It neither
// produces nor commits. The error of a record is a
// *transformer.ProcessError (a panic of user code is recovered into one
// whose Err is a *flechtwerk.PanicError); the first failing bucket, in
// bucket order, is the one reported.
func Run(ctx context.Context, p Params, recs []*kgo.Record) (*Result, error) {
	res := &Result{Offsets: make(map[string]int64), Records: len(recs)}
	if len(recs) == 0 {
		return res, nil
	}
	ordered := slices.Clone(recs)
	slices.SortStableFunc(ordered, func(x, y *kgo.Record) int {
		if c := cmp.Compare(p.TopicOrder[x.Topic], p.TopicOrder[y.Topic]); c != 0 {
			return c
		}
		return cmp.Compare(x.Offset, y.Offset)
	})
	for _, r := range ordered {
		if r.Partition != p.Partition {
			return nil, fmt.Errorf("%s: got record of topic %s partition %d", p.Name, r.Topic, r.Partition)
		}
		if next := r.Offset + 1; next > res.Offsets[r.Topic] {
			res.Offsets[r.Topic] = next
		}
	}
	// Transaction markers of transactional producers upstream take
	// offsets too. They count for the committed offset (or lag would stay
	// at 1 behind every marker) but are not input.
	ordered = slices.DeleteFunc(ordered, func(r *kgo.Record) bool { return r.Attrs.IsControl() })
	res.Records = len(ordered)

	tr := p.Transformer
	stateful := tr.Stateful()
	var buckets []*bucket
	byKey := make(map[string]*bucket)
	for _, r := range ordered {
		in, err := prepare(tr, r)
		if err != nil {
			return nil, recordError(r, err)
		}
		if stateful && len(in.Key) == 0 {
			return nil, recordError(r, errors.New("record has an empty state key; a stateful transformer needs one (set transformer.StateKey)"))
		}
		bk := byKey[string(in.Key)]
		if bk == nil {
			bk = &bucket{key: in.Key}
			byKey[string(in.Key)] = bk
			buckets = append(buckets, bk)
		}
		bk.recs = append(bk.recs, r)
		bk.in = append(bk.in, in)
	}

	var wg sync.WaitGroup
	for _, bk := range buckets {
		// A spent deadline wins over a free slot: the batch is over.
		if err := ctx.Err(); err != nil {
			wg.Wait()
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		select {
		case p.Sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, fmt.Errorf("%s: %w", p.Name, ctx.Err())
		}
		wg.Add(1)
		go func() {
			defer func() { <-p.Sem; wg.Done() }()
			runBucket(ctx, p, bk, stateful)
		}()
	}
	wg.Wait()

	for _, bk := range buckets {
		if bk.err != nil {
			return nil, bk.err
		}
	}
	for _, bk := range buckets {
		res.Outputs = append(res.Outputs, bk.outs...)
		switch bk.op {
		case stage.Put:
			res.Writes = append(res.Writes, store.Write{Key: bk.key, Value: bk.state})
		case stage.Delete:
			res.Writes = append(res.Writes, store.Write{Key: bk.key, Delete: true})
		}
	}
	return res, nil
}

// runBucket reads the bucket's state once, then threads it through the
// bucket's records, serially.
func runBucket(ctx context.Context, p Params, bk *bucket, stateful bool) {
	var (
		cur   []byte
		found bool
	)
	if stateful {
		var err error
		cur, found, err = p.State(bk.key)
		if err != nil {
			bk.err = fmt.Errorf("%s: %w", p.Name, err)
			return
		}
	}
	for i, r := range bk.recs {
		res, err := process(ctx, p.Transformer, bk.in[i], cur, found)
		if err != nil {
			bk.err = recordError(r, err)
			return
		}
		bk.outs = append(bk.outs, res.Outputs...)
		if !stateful {
			continue
		}
		switch res.Op {
		case stage.Put:
			cur, found = res.State, true
			bk.op, bk.state = stage.Put, res.State
		case stage.Delete:
			// A delete of a key that never existed before this batch
			// still writes a tombstone: cheap, and always correct.
			cur, found = nil, false
			bk.op, bk.state = stage.Delete, nil
		}
	}
}

func recordError(r *kgo.Record, err error) error {
	return &transformer.ProcessError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Err: err}
}

// prepare calls the stage's Prepare (the user's state-key function),
// recovering a panic.
func prepare(tr stage.Transformer, r *kgo.Record) (in stage.Input, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return tr.Prepare(r)
}

// process calls the stage's Process (the user's transform and codec),
// recovering a panic.
func process(ctx context.Context, tr stage.Transformer, in stage.Input, state []byte, found bool) (res stage.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return tr.Process(ctx, in, state, found)
}
