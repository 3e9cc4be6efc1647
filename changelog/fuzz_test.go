package changelog_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/store"
)

// fuzzWrites turns b into state writes: per write a control byte (delete,
// nil value, with headers), a key length, the key, a value length and the
// value.
func fuzzWrites(b []byte) (ws []store.Write, headers [][]kgo.RecordHeader) {
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
	for len(b) > 0 && len(ws) < 16 {
		ctl := byte1()
		w := store.Write{Key: bytes.Clone(take(int(byte1() % 8)))}
		if ctl&0x01 != 0 {
			w.Delete = true
		} else if ctl&0x02 == 0 {
			w.Value = bytes.Clone(take(int(byte1() % 64))) // else: a put of a nil value
		}
		var hs []kgo.RecordHeader
		if ctl&0x04 != 0 {
			hs = []kgo.RecordHeader{{Key: "\xff", Value: nil}, {Key: "", Value: bytes.Clone(take(int(byte1() % 8)))}}
		}
		ws = append(ws, w)
		headers = append(headers, hs)
	}
	return ws, headers
}

// FuzzRestore writes arbitrary state writes to a changelog partition as
// the runtime does (changelog.Record: nil-valued puts, empty values,
// tombstones, empty keys, with arbitrary headers the restore must ignore)
// and restores the partition into a fresh store: the store holds exactly
// the last write of every key, a put of an empty or nil value is kept as
// an empty value and not taken for a tombstone.
func FuzzRestore(f *testing.F) {
	c := kafkatest.New(f)
	f.Add([]byte(nil))
	f.Add([]byte{0, 1, 'k', 1, 'v'})
	f.Add([]byte{0, 1, 'k', 0, 2, 1, 'k', 1, 1, 'k'})                          // empty value, nil value, tombstone
	f.Add([]byte{0, 0, 3, 'v', 0xff, 0xfe, 5, 2, 'k', 0xff, 1, 'h'})           // empty key, invalid UTF-8, headers
	f.Add([]byte{1, 1, 'k', 0, 1, 'k', 63, '{', '"', 'n', '"', ':', '1', '}'}) // tombstone then put
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, b []byte) {
		ws, hs := fuzzWrites(b)
		topic := kafkatest.Name("fuzz-changelog-" + strconv.FormatInt(n.Add(1), 10))
		c.CreateTopic(t, topic, 2)
		want := map[string][]byte{}
		var recs []*kgo.Record
		for i, w := range ws {
			r := changelog.Record(topic, 1, w)
			require.Equal(t, w.Delete, r.Value == nil, "a delete and only a delete is a tombstone: %+v", w)
			r.Headers = hs[i]
			recs = append(recs, r)
			if w.Delete {
				delete(want, string(w.Key))
			} else {
				want[string(w.Key)] = bytes.Clone(w.Value)
			}
		}
		if len(recs) > 0 {
			c.Produce(t, recs...)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := store.Open(ctx, filepath.Join(t.TempDir(), "0"), store.Options{})
		require.NoError(t, err)
		defer st.Close()
		applied, err := changelog.Restore(ctx, c.Adm, topic, 1, st, kgo.SeedBrokers(c.Brokers...))
		require.NoError(t, err)
		require.Equal(t, len(ws), applied)

		got := map[string][]byte{}
		require.NoError(t, st.Range(func(k, v []byte) bool {
			got[string(k)] = bytes.Clone(v)
			return true
		}))
		require.Len(t, got, len(want), "restored keys")
		for k, v := range want {
			g, ok := got[k]
			require.True(t, ok, "key %q missing after restore", k)
			require.True(t, bytes.Equal(v, g), "key %q: restored %q, wrote %q", k, g, v)
		}
	})
}
