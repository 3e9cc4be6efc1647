package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/task"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// running is a Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error // receives Run's result once
	exited chan struct{}
	err    error
}

// stop cancels Run and returns its result.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.exited:
		return r.err
	case <-time.After(60 * time.Second):
		t.Fatal("runner did not stop within 60s")
		return nil
	}
}

func logger(t testing.TB) *slog.Logger {
	if os.Getenv("FLECHTWERK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func start(t testing.TB, c *kafkatest.Cluster, proc task.Processor, opts ...runner.Opt) *running {
	t.Helper()
	all := append([]runner.Opt{
		runner.SeedBrokers(c.Brokers...),
		runner.SessionTimeout(6 * time.Second),
		runner.WithLogger(logger(t)),
	}, opts...)
	r, err := runner.New(proc, all...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{cancel: cancel, done: make(chan error, 1), exited: make(chan struct{})}
	go func() {
		rn.err = r.Run(ctx)
		close(rn.exited)
		rn.done <- rn.err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rn.exited:
		case <-time.After(60 * time.Second):
			t.Error("runner did not stop within 60s")
		}
	})
	return rn
}

// counter counts records per key and emits "key=count" to out.
func counter(out string) *transformer.Transformer[int] {
	return transformer.New(func(ctx context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		e.Send(out, rec.Key, []byte(strconv.Itoa(n)))
		return nil
	})
}

// inputs returns n records spread over keys k0..k(keys-1), each key pinned to
// partition (key index % partitions), values "0".."n-1".
func inputs(topic string, n, keys int, partitions int32) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range n {
		k := i % keys
		recs[i] = &kgo.Record{
			Topic: topic, Partition: int32(k) % partitions,
			Key: []byte(fmt.Sprintf("k%d", k)), Value: []byte(strconv.Itoa(i)),
		}
	}
	return recs
}

// waitCommitted waits until the group's committed offsets on topic equal
// its end offsets (consumer lag 0).
func waitCommitted(t testing.TB, c *kafkatest.Cluster, group, topic string, timeout time.Duration, done <-chan error) {
	t.Helper()
	ends := c.EndOffsets(t, topic)
	deadline := time.Now().Add(timeout)
	for {
		got := c.CommittedOffsets(t, group, topic)
		ok := true
		for p, end := range ends {
			if end > 0 && got[p] != end {
				ok = false
			}
		}
		if ok {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("runner ended while waiting for lag 0: %v (committed %v, ends %v)", err, got, ends)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag not 0 after %v: committed %v, ends %v", timeout, got, ends)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
