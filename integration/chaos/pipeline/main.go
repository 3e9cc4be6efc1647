// Command pipeline is the processor of the pipeline chaos test: three
// flechtwerk transformers in one runner.Pipeline.
//
// Every input record carries a key kX and a sequence number n as its value.
//
//   - stamp ({app}-stamp, stateful) counts the records of each input key
//     and sends {"key":kX,"n":n,"kseq":S} keyed by kX to the repartition
//     topic {app}-rekey-stamped-repartition, where S is the key's count
//     after this record;
//   - rekey ({app}-rekey, stateless) re-keys each record by its word,
//     "w" + n%words, into {app}-count-words-repartition;
//   - count ({app}-count, stateful) counts the records of each word and
//     emits {"key":kX,"n":n,"kseq":S,"word":W,"seq":C} keyed by the word
//     to the output topic, C being the word's count after this record.
//
// Under exactly-once every n reaches the output once, each input key's
// kseq runs 1..count, and each word's seq runs 1..count, whatever happens
// to the processes. It runs until SIGINT or SIGTERM (a graceful stop) and
// exits non-zero when Run fails. It logs to stderr.
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

// Output is the value of every output record (and, without Word and
// Seq, of the stamped records).
type Output struct {
	Key  string `json:"key"`
	N    int64  `json:"n"`
	KSeq int64  `json:"kseq"`
	Word string `json:"word,omitempty"`
	Seq  int64  `json:"seq,omitempty"`
}

func main() {
	var (
		brokers        = flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
		app            = flag.String("app", "", "application id prefix of the stages")
		in             = flag.String("in", "", "input topic")
		out            = flag.String("out", "", "output topic")
		stateDir       = flag.String("state-dir", "", "state directory (default $TMPDIR/flechtwerk)")
		clientID       = flag.String("client-id", "", "Kafka client id of every client (names this process in the groups)")
		sessionTimeout = flag.Duration("session-timeout", 10*time.Second, "group session timeout")
		maxPoll        = flag.Int("max-poll", 500, "max records per batch")
		commitInterval = flag.Duration("commit-interval", 0, "commit interval (0: the runner's default)")
		words          = flag.Int("words", 13, "words to re-key into: w0 .. w{words-1}")
		logLevel       = flag.String("log-level", "info", "debug, info, warn or error")
	)
	flag.Parse()
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil || *app == "" || *in == "" || *out == "" || *words < 1 {
		fmt.Fprintln(os.Stderr, "pipeline: -app, -in, -out and a valid -log-level and -words are required")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	stampApp, rekeyApp, countApp := *app+"-stamp", *app+"-rekey", *app+"-count"
	popts := []runner.Opt{runner.SeedBrokers(strings.Split(*brokers, ",")...), runner.WithLogger(log)}
	if *clientID != "" {
		popts = append(popts, runner.WithKafkaOpts(kgo.ClientID(*clientID)))
	}
	p, err := runner.NewPipeline(*app, popts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pipeline: %v\n", err)
		os.Exit(2)
	}
	stamped := p.Repartition("stamped", stampApp, rekeyApp, 0)
	byWord := p.Repartition("words", rekeyApp, countApp, 0)

	stamp := transformer.New(func(_ context.Context, rec *transformer.Record, count int64, e *transformer.Emitter[int64]) error {
		n, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil {
			return fmt.Errorf("value of %s/%d@%d is not a number: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		count++
		e.SetState(count)
		v, err := json.Marshal(Output{Key: string(rec.Key), N: n, KSeq: count})
		if err != nil {
			return err
		}
		e.Send(stamped, rec.Key, v)
		return nil
	})
	rekey := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
		var v Output
		if err := json.Unmarshal(rec.Value, &v); err != nil {
			return err
		}
		o.Send(byWord, []byte("w"+strconv.FormatInt(v.N%int64(*words), 10)), rec.Value)
		return nil
	})
	count := transformer.New(func(_ context.Context, rec *transformer.Record, count int64, e *transformer.Emitter[int64]) error {
		var v Output
		if err := json.Unmarshal(rec.Value, &v); err != nil {
			return err
		}
		count++
		e.SetState(count)
		v.Word, v.Seq = string(rec.Key), count
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		e.Send(*out, rec.Key, b)
		return nil
	})

	common := []runner.TransformerOpt{runner.SessionTimeout(*sessionTimeout), runner.MaxPollRecords(*maxPoll)}
	if *commitInterval > 0 {
		common = append(common, runner.CommitInterval(*commitInterval))
	}
	if *stateDir != "" {
		common = append(common, runner.StateDir(*stateDir))
	}
	for _, st := range []struct {
		s    runner.Stage
		app  string
		from string
	}{{stamp, stampApp, *in}, {rekey, rekeyApp, stamped}, {count, countApp, byWord}} {
		if _, err := p.AddTransformer(st.s, append([]runner.TransformerOpt{runner.ApplicationID(st.app), runner.InputTopics(st.from)}, common...)...); err != nil {
			fmt.Fprintf(os.Stderr, "pipeline: %v\n", err)
			os.Exit(2)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("pipeline starting", "pid", os.Getpid(), "app", *app, "in", *in, "out", *out, "client_id", *clientID)
	if err := p.Run(ctx); err != nil {
		log.Error("pipeline: run failed", "err", err)
		os.Exit(1)
	}
	log.Info("pipeline stopped")
}
