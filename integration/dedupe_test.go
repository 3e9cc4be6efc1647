package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// setter sets the state of the record's key to the record's value, or
// deletes it when the value is "del". It emits nothing.
func setter() *transformer.Stage[[]byte] {
	return transformer.New(func(ctx context.Context, rec *transformer.Record, _ []byte, e *transformer.Emitter[[]byte]) error {
		if string(rec.Value) == "del" {
			e.DeleteState()
		} else {
			e.SetState(rec.Value)
		}
		return nil
	}, transformer.StateCodec(transformer.Bytes()))
}

// changelogEntry is one changelog record: a value, or a tombstone.
type changelogEntry struct {
	Value     string
	Tombstone bool
}

func put(v string) changelogEntry { return changelogEntry{Value: v} }

var tombstone = changelogEntry{Tombstone: true}

// changelogByKey returns the changelog's records per key, in log order.
func changelogByKey(recs []*kgo.Record) map[string][]changelogEntry {
	out := map[string][]changelogEntry{}
	for _, r := range recs {
		e := changelogEntry{Value: string(r.Value), Tombstone: r.Value == nil}
		out[string(r.Key)] = append(out[string(r.Key)], e)
	}
	return out
}

// TestChangelogDedupe runs batches in which keys are written several times:
// each batch writes exactly one changelog record per written key, holding
// the key's last value of the batch; a delete of state is a tombstone, a
// put after a delete in the same batch wins, and a key that had no state
// before the batch and has none after it (deleted) gets no record.
func TestChangelogDedupe(t *testing.T) {
	c := kafkatest.New(t)
	in, app := kafkatest.Name("in"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	rec := func(k, v string) *kgo.Record { return &kgo.Record{Topic: in, Key: []byte(k), Value: []byte(v)} }
	opts := []runner.TransformerOpt{runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(1000)}
	clog := app + "-changelog"

	// Batch 1, produced before the runner starts: one poll holds it.
	c.Produce(t,
		rec("a", "a1"), rec("b", "b1"), rec("a", "a2"), rec("c", "del"),
		rec("d", "d1"), rec("b", "del"), rec("a", "a3"), rec("d", "del"),
		rec("e", "e1"), rec("d", "d2"), rec("f", "f1"))
	rn := start(t, c, setter(), opts...)
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	first := readStable(t, c, clog)
	require.Equal(t, map[string][]changelogEntry{
		"a": {put("a3")},
		"d": {put("d2")},
		"e": {put("e1")},
		"f": {put("f1")},
	}, changelogByKey(first), "one changelog record per key written in the batch; none for b and c (no state before, none after)")

	// Batch 2 after a restart: only the keys it writes get a record; the
	// delete of committed state (f) is a tombstone, the deletes of keys
	// without state (c, g) write nothing.
	c.Produce(t, rec("a", "a4"), rec("b", "b2"), rec("a", "a5"), rec("f", "del"), rec("c", "del"), rec("g", "del"))
	rn = start(t, c, setter(), opts...)
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))
	require.Equal(t, map[string][]changelogEntry{
		"a": {put("a3"), put("a5")},
		"b": {put("b2")},
		"d": {put("d2")},
		"e": {put("e1")},
		"f": {put("f1"), tombstone},
	}, changelogByKey(readStable(t, c, clog)))
}
