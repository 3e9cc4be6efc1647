package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// appender appends "<topic>:<value>" to the state of the record's key and
// emits the new state to out.
func appender(out string) *transformer.Stage[[]string] {
	return transformer.New(func(ctx context.Context, rec *transformer.Record, seen []string, e *transformer.Emitter[[]string]) error {
		seen = append(seen, rec.Topic+":"+string(rec.Value))
		e.SetState(seen)
		e.Send(out, rec.Key, []byte(strings.Join(seen, ",")))
		return nil
	})
}

// outputsByKey groups values by key, in log order.
func outputsByKey(recs []*kgo.Record) map[string][]string {
	out := map[string][]string{}
	for _, r := range recs {
		out[string(r.Key)] = append(out[string(r.Key)], string(r.Value))
	}
	return out
}

// TestSameKeyRunsInOffsetOrder sends many records of a few keys through
// small batches: each record sees the state the previous record of its key
// left, in offset order, within a batch and across batches, so the i-th
// output of a key lists exactly its first i values.
func TestSameKeyRunsInOffsetOrder(t *testing.T) {
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 2)
	c.CreateTopic(t, out, 2)
	var recs []*kgo.Record
	for p := range int32(2) {
		rs := values(in, p, fmt.Sprintf("p%d-", p), 60, 4)
		for _, r := range rs {
			r.Key = fmt.Appendf(nil, "p%d-%s", p, r.Key)
		}
		recs = append(recs, rs...)
	}
	c.Produce(t, recs...)
	rn := start(t, c, appender(out), runner.ApplicationID(app), runner.InputTopics(in),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(7))
	waitCommitted(t, c, app, in, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	want := map[string][]string{}
	seen := map[string][]string{}
	for _, r := range recs { // produced in offset order per partition
		k := string(r.Key)
		seen[k] = append(seen[k], in+":"+string(r.Value))
		want[k] = append(want[k], strings.Join(seen[k], ","))
	}
	require.Equal(t, want, outputsByKey(readStable(t, c, out)))
}

// TestKeysRunConcurrently puts two keys into one batch of one partition;
// the transform of the first key blocks until the second key's transform
// has started. That only finishes when different keys run concurrently:
// run serially, the first key waits in vain and fails the batch. With
// Concurrency(1) the runner does run them serially, which shows the
// barrier catches serial execution.
func TestKeysRunConcurrently(t *testing.T) {
	tests := []struct {
		name        string
		concurrency int
		// wait is how long key a waits for key b before failing.
		wait       time.Duration
		concurrent bool
	}{
		{name: "default concurrency", concurrency: 64, wait: 20 * time.Second, concurrent: true},
		{name: "Concurrency(1)", concurrency: 1, wait: time.Second, concurrent: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 1)
			c.CreateTopic(t, out, 1)
			// a first, so that a serial run starts with a and never reaches b.
			c.Produce(t,
				&kgo.Record{Topic: in, Key: []byte("a"), Value: []byte("a0")},
				&kgo.Record{Topic: in, Key: []byte("b"), Value: []byte("b0")})

			bStarted := make(chan struct{})
			var once sync.Once
			errSerial := errors.New("key b did not start while key a ran: keys ran serially")
			proc := echoCounter(out, func(rec *transformer.Record) error {
				switch string(rec.Key) {
				case "b":
					once.Do(func() { close(bStarted) })
				case "a":
					select {
					case <-bStarted:
					case <-time.After(tc.wait):
						return errSerial
					}
				}
				return nil
			})
			rn := start(t, c, proc, runner.ApplicationID(app), runner.InputTopics(in),
				runner.StateDir(t.TempDir()), runner.MaxPollRecords(1000), runner.Concurrency(tc.concurrency))
			if !tc.concurrent {
				require.ErrorIs(t, rn.wait(t, 30*time.Second), errSerial)
				return
			}
			waitCommitted(t, c, app, in, 30*time.Second, rn.done)
			require.NoError(t, rn.stop(t))
			require.ElementsMatch(t, []string{"a0#1", "b0#1"}, valuesOf(readStable(t, c, out)))
		})
	}
}

// TestInputTopicOrder sends records of the same keys through two input
// topics (equal partition counts) in one batch, the second topic's records
// produced first: a key's records run in InputTopics order, then offset
// order, whatever order they were written in.
func TestInputTopicOrder(t *testing.T) {
	c := kafkatest.New(t)
	first, second := kafkatest.Name("first"), kafkatest.Name("second")
	out, app := kafkatest.Name("out"), kafkatest.Name("app")
	for _, topic := range []string{first, second, out} {
		c.CreateTopic(t, topic, 2)
	}
	rec := func(topic string, p int32, k, v string) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: p, Key: []byte(k), Value: []byte(v)}
	}
	// The second topic is written first, so neither offset nor timestamp
	// order puts the first topic first.
	c.Produce(t, rec(second, 0, "x", "s0"), rec(second, 1, "y", "s0"), rec(second, 0, "x", "s1"), rec(second, 1, "y", "s1"))
	c.Produce(t, rec(first, 0, "x", "f0"), rec(first, 1, "y", "f0"), rec(first, 0, "x", "f1"), rec(first, 1, "y", "f1"))

	rn := start(t, c, appender(out), runner.ApplicationID(app), runner.InputTopics(first, second),
		runner.StateDir(t.TempDir()), runner.MaxPollRecords(1000))
	waitCommitted(t, c, app, first, 30*time.Second, rn.done)
	waitCommitted(t, c, app, second, 30*time.Second, rn.done)
	require.NoError(t, rn.stop(t))

	order := []string{first + ":f0", first + ":f1", second + ":s0", second + ":s1"}
	var want []string
	for i := range order {
		want = append(want, strings.Join(order[:i+1], ","))
	}
	require.Equal(t, map[string][]string{"x": want, "y": want}, outputsByKey(readStable(t, c, out)))
}
