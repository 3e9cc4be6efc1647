package transformer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The records of one call share their allocations (toKgo): each keeps its
// own headers, in order, and growing one's headers leaves the next's alone.
func TestOutputsKeepTheirOwnHeaders(t *testing.T) {
	h := func(k, v string) Header { return Header{Key: k, Value: []byte(v)} }
	outs := []Output{
		{Topic: "a", Key: []byte("k1"), Value: []byte("v1"), Headers: []Header{h("x", "1"), h("y", "2")}},
		{Topic: "b", Key: []byte("k2"), Value: []byte("v2")},
		{Topic: "c", Key: []byte("k3"), Value: []byte("v3"), Headers: []Header{h("z", "3")}},
	}
	tr := New(func(_ context.Context, _ *Record, _ int, e *Emitter[int]) error {
		for _, o := range outs {
			e.SendRecord(o)
		}
		return nil
	})
	a := adapter[int]{tr}
	in, err := a.Prepare(&kgo.Record{Topic: "in", Key: []byte("k")})
	require.NoError(t, err)
	res, err := a.Process(context.Background(), in, nil, false)
	require.NoError(t, err)
	require.Len(t, res.Outputs, len(outs))
	for i, o := range outs {
		r := res.Outputs[i]
		require.Equal(t, o.Topic, r.Topic)
		require.Equal(t, int32(-1), r.Partition)
		require.Equal(t, o.Key, r.Key)
		require.Equal(t, o.Value, r.Value)
		require.Len(t, r.Headers, len(o.Headers), "output %d", i)
		for j, oh := range o.Headers {
			require.Equal(t, kgo.RecordHeader{Key: oh.Key, Value: oh.Value}, r.Headers[j])
		}
	}
	require.NotSame(t, res.Outputs[0], res.Outputs[1])
	res.Outputs[0].Headers = append(res.Outputs[0].Headers, kgo.RecordHeader{Key: "grown"})
	require.Equal(t, kgo.RecordHeader{Key: "z", Value: []byte("3")}, res.Outputs[2].Headers[0])
	res.Outputs[1].Headers = append(res.Outputs[1].Headers, kgo.RecordHeader{Key: "grown"})
	require.Equal(t, kgo.RecordHeader{Key: "z", Value: []byte("3")}, res.Outputs[2].Headers[0])
}
