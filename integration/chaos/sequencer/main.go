// Command sequencer is the exactly-once processor of the chaos tests: a
// flechtwerk transformer that keeps a running count per key.
//
// Every input record carries a key and a sequence number n as its value.
// The transformer counts the records of each key (state: a JSON int) and
// emits {"key":K,"n":n,"seq":S} to the output topic under the same key, where
// S is the key's count after this record. Under exactly-once the outputs of
// key K carry seq 1, 2, 3, ... with no gap or repeat, whatever happens to
// the processes.
//
// With -dead-letter TOPIC, a value that is not a number is an invalid
// record (transformer.Invalid) that goes to TOPIC in the batch's
// transaction; without it, it ends Run.
//
// With -timers, the outputs come from timers: a record puts n in the
// named store "pending" under its key and sets the key's event-time timer
// "n{n}" (zero-padded) due at the stream time, so that it fires in the
// same batch, right after the record; the timer's callback counts,
// emits the output and deletes the pending entry. The contract of the
// outputs and the state is the same, and every output is a timer that
// fired exactly once.
//
// It runs until SIGINT or SIGTERM (a graceful stop) and exits non-zero when
// Run fails. It logs to stderr.
package main

import (
	"context"
	"encoding/json"
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

	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Output is the value of every output record.
type Output struct {
	Key string `json:"key"`
	N   int64  `json:"n"`
	Seq int64  `json:"seq"`
}

func main() {
	var (
		brokers        = flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
		app            = flag.String("app", "", "application id (group, transactional id prefix, changelog)")
		in             = flag.String("in", "", "input topic")
		out            = flag.String("out", "", "output topic")
		stateDir       = flag.String("state-dir", "", "state directory (default $TMPDIR/flechtwerk)")
		clientID       = flag.String("client-id", "", "Kafka client id of every client (names this process in the group)")
		sessionTimeout = flag.Duration("session-timeout", 10*time.Second, "group session timeout")
		maxPoll        = flag.Int("max-poll", 500, "max records per batch")
		txnTimeout     = flag.Duration("txn-timeout", 60*time.Second, "transaction timeout")
		batchTimeout   = flag.Duration("batch-timeout", 30*time.Second, "batch timeout")
		commitInterval = flag.Duration("commit-interval", 0, "commit interval (0: the runner's default)")
		work           = flag.Duration("work", 0, "simulated work per record (widens the mid-batch window)")
		logLevel       = flag.String("log-level", "info", "debug, info, warn or error")
		deadLetter     = flag.String("dead-letter", "", "dead-letter topic: a value that is not a number is an invalid record sent there (default: it ends Run)")
		standby        = flag.Int("standby-replicas", 0, "standby replicas of every task (runner.StandbyReplicas)")
		timers         = flag.Bool("timers", false, "emit every output from a timer the record sets (see the package doc)")
		sharedProducer = flag.Bool("shared-producer", false, "one transactional producer for the instance (runner.SharedProducer); -txn-timeout and -batch-timeout then default to its own")
	)
	flag.Parse()

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "sequencer: -log-level: %v\n", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	parse := func(rec *transformer.Record) (int64, error) {
		n, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil {
			if *deadLetter != "" {
				return 0, transformer.Invalid(fmt.Errorf("sequencer: value is not a number: %w", err))
			}
			return 0, fmt.Errorf("sequencer: value of %s/%d@%d is not a number: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		if *work > 0 {
			time.Sleep(*work)
		}
		return n, nil
	}
	emit := func(e *transformer.Emitter[int64], key []byte, n, count int64) error {
		e.SetState(count)
		v, err := json.Marshal(Output{Key: string(key), N: n, Seq: count})
		if err != nil {
			return err
		}
		e.Send(*out, key, v)
		return nil
	}
	seq := transformer.New(func(ctx context.Context, rec *transformer.Record, count int64, e *transformer.Emitter[int64]) error {
		n, err := parse(rec)
		if err != nil {
			return err
		}
		return emit(e, rec.Key, n, count+1)
	})
	if *timers {
		pending := transformer.NewStore[int64]("pending", nil)
		seq = transformer.New(func(ctx context.Context, rec *transformer.Record, count int64, e *transformer.Emitter[int64]) error {
			n, err := parse(rec)
			if err != nil {
				return err
			}
			name := fmt.Sprintf("n%019d", n)
			if err := pending.Put(e, []byte(name), n); err != nil {
				return err
			}
			e.SetTimer(name, e.StreamTime())
			return nil
		}, transformer.Stores(pending), transformer.OnTimer(func(ctx context.Context, t transformer.Timer, count int64, e *transformer.Emitter[int64]) error {
			n, ok, err := pending.Get(e, []byte(t.Name))
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("sequencer: timer %s of key %s fired without its pending entry", t.Name, t.Key)
			}
			pending.Delete(e, []byte(t.Name))
			return emit(e, t.Key, n, count+1)
		}))
	}

	opts := []runner.TransformerOpt{
		runner.SeedBrokers(strings.Split(*brokers, ",")...),
		runner.ApplicationID(*app),
		runner.InputTopics(*in),
		runner.SessionTimeout(*sessionTimeout),
		runner.MaxPollRecords(*maxPoll),
		runner.WithLogger(log),
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *sharedProducer {
		opts = append(opts, runner.SharedProducer())
	}
	if !*sharedProducer || set["txn-timeout"] {
		opts = append(opts, runner.TransactionTimeout(*txnTimeout))
	}
	if !*sharedProducer || set["batch-timeout"] {
		opts = append(opts, runner.BatchTimeout(*batchTimeout))
	}
	if *commitInterval > 0 {
		opts = append(opts, runner.CommitInterval(*commitInterval))
	}
	if *standby > 0 {
		opts = append(opts, runner.StandbyReplicas(*standby))
	}
	if *deadLetter != "" {
		opts = append(opts, runner.InvalidRecords(runner.DeadLetter(*deadLetter)))
	}
	if *stateDir != "" {
		opts = append(opts, runner.StateDir(*stateDir))
	}
	if *clientID != "" {
		opts = append(opts, runner.WithKafkaOpts(kgo.ClientID(*clientID)))
	}
	if *out == "" {
		fmt.Fprintln(os.Stderr, "sequencer: -out is required")
		os.Exit(2)
	}
	r, err := runner.NewTransformer(seq, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sequencer: %v\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("sequencer starting", "pid", os.Getpid(), "app", *app, "in", *in, "out", *out, "client_id", *clientID)
	if err := r.Run(ctx); err != nil {
		log.Error("sequencer: run failed", "err", err)
		os.Exit(1)
	}
	log.Info("sequencer stopped")
}
