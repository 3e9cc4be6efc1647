package transformertest_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// fuzzInputs turns b into driver inputs: per input a control byte (topic,
// partition, nil key, nil value), a key length, the key, a value length,
// the value, a header length and the header value.
func fuzzInputs(b []byte) []transformertest.Input {
	take := func(n int) []byte {
		n = min(n, len(b))
		out := b[:n]
		b = b[n:]
		return out
	}
	byte1 := func() byte {
		if len(b) == 0 {
			return 0
		}
		return take(1)[0]
	}
	var ins []transformertest.Input
	for len(b) > 0 && len(ins) < 64 {
		ctl := byte1()
		in := transformertest.Input{
			Topic:     []string{"a", "b", "\xff", "a.b"}[ctl&3],
			Partition: int32(ctl>>2) & 3,
		}
		in.Key = bytes.Clone(take(int(byte1() % 8)))
		if ctl&0x10 != 0 {
			in.Key = nil
		}
		in.Value = bytes.Clone(take(int(byte1() % 32)))
		if ctl&0x20 != 0 {
			in.Value = nil
		}
		if ctl&0x40 != 0 {
			in.Headers = []transformer.Header{{Key: "h\xff", Value: bytes.Clone(take(int(byte1() % 8)))}}
		}
		ins = append(ins, in)
	}
	return ins
}

// FuzzDriver feeds arbitrary batches through the Driver and a counting
// transformer that deletes its state on an empty value: a batch with an
// empty key fails as a whole with a *transformer.ProcessError naming the
// record and changes nothing; otherwise the state, the changelog, the
// outputs and the offsets match a plain model of the batches.
func FuzzDriver(f *testing.F) {
	f.Add([]byte(nil), []byte(nil))
	f.Add([]byte{0, 1, 'k', 1, 'v'}, []byte{0x10, 0, 0})
	f.Add([]byte{0x05, 2, 'k', 0xff, 0, 0x45, 2, 'k', 0xff, 3, 'v', 'v', 'v', 3, 'h', 'd', 'r'}, []byte{0x20, 1, 'k', 0})
	f.Add([]byte{0x03, 1, 0xff, 1, 0x00, 0x03, 1, 0xff, 0, 0x0e, 7, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 1, 'x'}, []byte{0x01, 1, 'k', 1, 'v'})
	f.Fuzz(func(t *testing.T, b1, b2 []byte) {
		tr := transformer.New(func(_ context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
			if len(rec.Value) == 0 {
				out.DeleteState()
				return nil
			}
			out.SetState(n + 1)
			out.Send("out", rec.Key, []byte(fmt.Sprint(n+1)))
			return nil
		})
		d, err := transformertest.New(tr)
		require.NoError(t, err)
		model := map[int32]map[string]int{}
		next := map[string]map[int32]int64{}
		topicOrder := map[string]int{}
		var outputs int
		for _, ins := range [][]transformertest.Input{fuzzInputs(b1), fuzzInputs(b2)} {
			bad := -1
			for i, in := range ins {
				if len(in.Key) == 0 {
					bad = i
					break
				}
			}
			batch, err := d.Process(context.Background(), ins...)
			if bad >= 0 {
				require.Error(t, err)
				var pe *transformer.ProcessError
				require.True(t, errors.As(err, &pe), "error %v is not a *transformer.ProcessError", err)
				require.Contains(t, err.Error(), "empty state key")
				require.Empty(t, pe.Key)
				require.Len(t, d.Outputs(), outputs, "a failed batch produced outputs")
				continue
			}
			require.NoError(t, err)
			require.Equal(t, len(ins), batch.Records)
			// The Driver runs a partition's records in input-topic order
			// (topics ordered by first appearance, as no InputTopics were
			// given), then offset order: so does the model.
			for _, in := range ins {
				if _, ok := topicOrder[in.Topic]; !ok {
					topicOrder[in.Topic] = len(topicOrder)
				}
			}
			ordered := slices.Clone(ins)
			slices.SortStableFunc(ordered, func(x, y transformertest.Input) int {
				return cmp.Compare(topicOrder[x.Topic], topicOrder[y.Topic])
			})
			for _, in := range ordered {
				if next[in.Topic] == nil {
					next[in.Topic] = map[int32]int64{}
				}
				next[in.Topic][in.Partition]++
				if model[in.Partition] == nil {
					model[in.Partition] = map[string]int{}
				}
				if len(in.Value) == 0 {
					delete(model[in.Partition], string(in.Key))
				} else {
					model[in.Partition][string(in.Key)]++
					outputs++
				}
			}
			for topic, ps := range batch.Offsets {
				for p, off := range ps {
					require.Equal(t, next[topic][p], off, "offset of %s/%d", topic, p)
				}
			}
		}
		require.Len(t, d.Outputs(), outputs)
		for p, keys := range model {
			require.Len(t, d.StateKeys(p), len(keys), "state keys of partition %d", p)
			for k, n := range keys {
				got, ok, err := transformertest.State[int](d, p, []byte(k))
				require.NoError(t, err)
				require.True(t, ok, "state of %q in partition %d", k, p)
				require.Equal(t, n, got, "state of %q in partition %d", k, p)
			}
		}
	})
}
