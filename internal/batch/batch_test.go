package batch_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/transformer"
)

func rec(topic string, off int64, key, value string) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: 2, Offset: off, Key: []byte(key), Value: []byte(value)}
}

// journal appends "topic:offset" to its key's state, deletes it on "del",
// panics on "panic" and emits the state.
func journal(t *testing.T) stage.Transformer {
	tr := transformer.New(func(_ context.Context, r *transformer.Record, s string, e *transformer.Emitter[string]) error {
		switch string(r.Value) {
		case "del":
			e.DeleteState()
			return nil
		case "panic":
			panic("boom")
		}
		s += r.Topic + ":" + string(rune('0'+r.Offset)) + ";"
		e.SetState(s)
		e.Send("out", r.Key, []byte(s))
		return nil
	}, transformer.StateCodec(str{}))
	s, ok := stage.TransformerOf(tr)
	require.True(t, ok)
	return s
}

type str struct{}

func (str) Encode(s string) ([]byte, error) { return []byte(s), nil }
func (str) Decode(b []byte) (string, error) { return string(b), nil }

func params(t *testing.T, state map[string]string) (batch.Params, *int) {
	var mu sync.Mutex
	reads := 0
	return batch.Params{
		Transformer: journal(t),
		Partition:   2,
		TopicOrder:  map[string]int{"a": 0, "b": 1},
		State: func(key []byte) ([]byte, bool, error) {
			mu.Lock()
			defer mu.Unlock()
			reads++
			v, ok := state[string(key)]
			return []byte(v), ok, nil
		},
		Sem:  make(chan struct{}, 2),
		Name: "task 2",
	}, &reads
}

func TestRunOrdersBucketsThreadsStateAndKeepsTheLastWrite(t *testing.T) {
	p, reads := params(t, map[string]string{"x": "old;"})
	res, err := batch.Run(context.Background(), p, []*kgo.Record{
		rec("b", 1, "y", "v"), rec("a", 5, "x", "v"), rec("b", 0, "x", "v"), rec("a", 3, "y", "v"), rec("a", 4, "y", "del"),
	})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"a": 6, "b": 2}, res.Offsets)
	require.Equal(t, 5, res.Records)
	require.Equal(t, 2, *reads, "state is read once per bucket")
	var outs []string
	for _, o := range res.Outputs {
		outs = append(outs, string(o.Key)+"="+string(o.Value))
	}
	// Buckets in order of first appearance after sorting by topic order
	// then offset: y (a:3) before x (a:5).
	require.Equal(t, []string{"y=a:3;", "y=b:1;", "x=old;a:5;", "x=old;a:5;b:0;"}, outs)
	require.Equal(t, []store.Write{
		{Key: []byte("y"), Value: []byte("b:1;")},
		{Key: []byte("x"), Value: []byte("old;a:5;b:0;")},
	}, res.Writes)
}

func TestRunControlRecordsOnlyAdvanceOffsets(t *testing.T) {
	p, _ := params(t, nil)
	// A transaction marker: a control batch record.
	marker := rec("a", 7, "", "")
	marker.Attrs = kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Transactional: true, Control: true})
	res, err := batch.Run(context.Background(), p, []*kgo.Record{rec("a", 6, "x", "v"), marker})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"a": 8}, res.Offsets)
	require.Equal(t, 1, res.Records)
	require.Len(t, res.Outputs, 1)
}

func TestRunErrorsNameTheRecord(t *testing.T) {
	p, _ := params(t, nil)
	_, err := batch.Run(context.Background(), p, []*kgo.Record{rec("a", 1, "x", "v"), rec("a", 2, "", "v")})
	var pe *transformer.ProcessError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, transformer.ProcessError{Topic: "a", Partition: 2, Offset: 2, Key: []byte{}, Err: pe.Err}, *pe)
	require.ErrorContains(t, err, "empty state key")

	_, err = batch.Run(context.Background(), p, []*kgo.Record{rec("a", 1, "x", "v"), rec("a", 2, "x", "panic")})
	require.ErrorAs(t, err, &pe)
	require.Equal(t, int64(2), pe.Offset)
	var panicErr *flechtwerk.PanicError
	require.ErrorAs(t, err, &panicErr)
	require.Equal(t, "boom", panicErr.Value)

	_, err = batch.Run(context.Background(), p, []*kgo.Record{{Topic: "a", Partition: 1, Key: []byte("x")}})
	require.EqualError(t, err, "task 2: got record of topic a partition 1")

	p.State = func([]byte) ([]byte, bool, error) { return nil, false, errors.New("store closed") }
	_, err = batch.Run(context.Background(), p, []*kgo.Record{rec("a", 1, "x", "v")})
	require.EqualError(t, err, "task 2: store closed")
}

func TestRunPanicInStateKeyIsAProcessError(t *testing.T) {
	tr, ok := stage.TransformerOf(transformer.Stateless(
		func(context.Context, *transformer.Record, *transformer.Outputs) error { return nil },
		transformer.StateKey(func(r *transformer.Record) []byte { return []byte(strings.Repeat("k", int(r.Value[0]))) })))
	require.True(t, ok)
	_, err := batch.Run(context.Background(), batch.Params{Transformer: tr, Partition: 2, Sem: make(chan struct{}, 1)},
		[]*kgo.Record{rec("a", 4, "x", "")})
	var pe *transformer.ProcessError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, int64(4), pe.Offset)
	var panicErr *flechtwerk.PanicError
	require.ErrorAs(t, err, &panicErr)
}

func TestRunBoundsConcurrentBuckets(t *testing.T) {
	var mu sync.Mutex
	running, peak := 0, 0
	tr, ok := stage.TransformerOf(transformer.Stateless(func(context.Context, *transformer.Record, *transformer.Outputs) error {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		for range 1000 {
			_ = strings.Repeat("x", 10)
		}
		return nil
	}))
	require.True(t, ok)
	var recs []*kgo.Record
	for i := range 64 {
		recs = append(recs, rec("a", int64(i), string(rune('A'+i)), "v"))
	}
	_, err := batch.Run(context.Background(), batch.Params{Transformer: tr, Partition: 2, Sem: make(chan struct{}, 3)}, recs)
	require.NoError(t, err)
	require.LessOrEqual(t, peak, 3)
}

// TestRunBucketsShareTheSlotsAndGiveThemBack: more buckets than slots all
// run, never more at once than the semaphore holds, and every slot is free
// again after Run; a transform that ends its goroutine without returning
// (runtime.Goexit, what t.FailNow does) fails the batch and frees its slot
// too.
func TestRunBucketsShareTheSlotsAndGiveThemBack(t *testing.T) {
	var running, most atomic.Int32
	tr, ok := stage.TransformerOf(transformer.New(func(_ context.Context, r *transformer.Record, n int, e *transformer.Emitter[int]) error {
		now := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		if string(r.Value) == "exit" {
			runtime.Goexit()
		}
		time.Sleep(time.Millisecond)
		e.SetState(n + 1)
		return nil
	}))
	require.True(t, ok)
	sem := make(chan struct{}, 3)
	p := batch.Params{Transformer: tr, Partition: 2, Sem: sem, Name: "task 2",
		State: func([]byte) ([]byte, bool, error) { return nil, false, nil }}
	var recs []*kgo.Record
	for i := range 40 {
		recs = append(recs, rec("a", int64(i), fmt.Sprint("k", i%20), "v"))
	}
	res, err := batch.Run(context.Background(), p, recs)
	require.NoError(t, err)
	require.Len(t, res.Writes, 20, "every bucket ran")
	require.LessOrEqual(t, most.Load(), int32(3), "at most the semaphore's slots at once")
	require.Greater(t, most.Load(), int32(1), "buckets run concurrently")
	require.Zero(t, len(sem), "every slot is given back")

	_, err = batch.Run(context.Background(), p, append(recs, rec("a", 40, "k3", "exit")))
	require.ErrorContains(t, err, "task 2: a transform ended its goroutine without returning")
	require.Zero(t, len(sem), "the exited bucket's slot is given back")
}

// TestRunDeleteOfAbsentStateWritesNothing: a delete leaves a tombstone
// only for a key that had state when the batch began (Params.State: the
// committed state, or the open transaction's); a key that had none and
// has none at the end gets no write, also after a put within the batch.
func TestRunDeleteOfAbsentStateWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		state  map[string]string
		values []string // of key "k", in order
		want   []store.Write
	}{
		{name: "absent, deleted", values: []string{"del"}},
		{name: "absent, deleted twice", values: []string{"del", "del"}},
		{name: "absent, put then deleted", values: []string{"v", "del"}},
		{name: "present, deleted", state: map[string]string{"k": "old;"}, values: []string{"del"},
			want: []store.Write{{Key: []byte("k"), Delete: true}}},
		{name: "present, deleted then put", state: map[string]string{"k": "old;"}, values: []string{"del", "v"},
			want: []store.Write{{Key: []byte("k"), Value: []byte("a:1;")}}},
		{name: "absent, deleted then put", values: []string{"del", "v"},
			want: []store.Write{{Key: []byte("k"), Value: []byte("a:1;")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := params(t, tc.state)
			var recs []*kgo.Record
			for i, v := range tc.values {
				recs = append(recs, rec("a", int64(i), "k", v))
			}
			res, err := batch.Run(context.Background(), p, recs)
			require.NoError(t, err)
			require.Equal(t, tc.want, res.Writes)
		})
	}
}
