// Command naive is a deliberately broken processor for the chaos tests: it
// does what the sequencer does with a plain consume → produce → commit loop
// and no transactions, so it is at-least-once at best.
//
// Per poll it counts each record's key in memory, produces the outputs with
// an ordinary (idempotent, non-transactional) producer, waits -commit-delay
// and only then commits the offsets through the group. A kill between the
// produce and the commit redelivers the batch to the next owner, which
// produces it again (duplicates); the counters live in memory, so a new
// owner restarts every key at seq 1. The chaos harness must catch both.
//
// It exists only to prove that the harness finds real exactly-once bugs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

type output struct {
	Key string `json:"key"`
	N   int64  `json:"n"`
	Seq int64  `json:"seq"`
}

func main() {
	var (
		brokers        = flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
		app            = flag.String("app", "", "consumer group")
		in             = flag.String("in", "", "input topic")
		out            = flag.String("out", "", "output topic")
		clientID       = flag.String("client-id", "", "Kafka client id")
		sessionTimeout = flag.Duration("session-timeout", 10*time.Second, "group session timeout")
		maxPoll        = flag.Int("max-poll", 500, "max records per poll")
		commitDelay    = flag.Duration("commit-delay", 300*time.Millisecond, "wait between producing a batch and committing its offsets (the crash window)")
		_              = flag.String("state-dir", "", "ignored: the naive processor keeps its state in memory")
		logLevel       = flag.String("log-level", "info", "debug, info, warn or error")
	)
	flag.Parse()
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "naive: -log-level: %v\n", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ConsumerGroup(*app),
		kgo.ConsumeTopics(*in),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(*sessionTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, *sessionTimeout/3)),
		kgo.ProducerLinger(0),
		kgo.WithLogger(kslog.New(log)),
	}
	if *clientID != "" {
		opts = append(opts, kgo.ClientID(*clientID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "naive: %v\n", err)
		os.Exit(2)
	}
	defer cl.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("naive starting", "pid", os.Getpid(), "app", *app, "client_id", *clientID)

	counts := map[string]int64{} // lost on every restart: the second bug
	for ctx.Err() == nil {
		fs := cl.PollRecords(ctx, *maxPoll)
		if fs.IsClientClosed() || ctx.Err() != nil {
			break
		}
		if err := fs.Err0(); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("naive: fetch failed", "err", err)
			os.Exit(1)
		}
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		outs := make([]*kgo.Record, 0, len(recs))
		for _, r := range recs {
			n, err := strconv.ParseInt(string(r.Value), 10, 64)
			if err != nil {
				log.Error("naive: bad value", "err", err)
				os.Exit(1)
			}
			counts[string(r.Key)]++
			v, _ := json.Marshal(output{Key: string(r.Key), N: n, Seq: counts[string(r.Key)]})
			outs = append(outs, &kgo.Record{Topic: *out, Key: r.Key, Value: v})
		}
		if err := cl.ProduceSync(context.WithoutCancel(ctx), outs...).FirstErr(); err != nil {
			log.Error("naive: produce failed", "err", err)
			os.Exit(1)
		}
		// The crash window: outputs are visible, offsets not committed.
		time.Sleep(*commitDelay)
		if err := cl.CommitRecords(context.WithoutCancel(ctx), recs...); err != nil {
			// Typically a rebalance: the new owner redelivers.
			log.Warn("naive: commit failed", "err", err)
		}
	}
	log.Info("naive stopped")
}
