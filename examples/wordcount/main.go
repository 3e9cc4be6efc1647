// Command wordcount counts words exactly once.
//
// With no flags it starts an embedded Kafka broker (kfake) on 127.0.0.1,
// creates its topics, produces a few sentences, runs the counting
// transformer until every sentence is committed, prints the counts read back
// with a read_committed consumer, and exits 0. With -brokers it runs against
// a real cluster (creating its topics if missing).
//
//	go run ./examples/wordcount
//	go run ./examples/wordcount -brokers localhost:9092
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

var sentences = []string{
	"the quick brown fox jumps over the lazy dog",
	"exactly once is the product",
	"the dog sleeps and the fox runs",
	"once more with feeling",
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated Kafka brokers; empty starts an embedded broker")
	app := flag.String("app", "wordcount", "application id")
	in := flag.String("in", "sentences", "input topic")
	out := flag.String("out", "word-counts", "output topic")
	partitions := flag.Int("partitions", 3, "partitions of topics this program creates")
	verbose := flag.Bool("v", false, "log what the runner does")
	flag.Parse()
	if err := run(*brokers, *app, *in, *out, int32(*partitions), *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		os.Exit(1)
	}
}

func run(brokers, app, in, out string, partitions int32, verbose bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	seeds := strings.Split(brokers, ",")
	if brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer cluster.Close()
		seeds = cluster.ListenAddrs()
		fmt.Println("embedded broker at", seeds[0])
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	for _, t := range []string{in, out} {
		if _, err := adm.CreateTopic(ctx, partitions, -1, nil, t); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating %s: %w", t, err)
		}
	}

	// Split sentences into words keyed by the word, so each word's count
	// lives on one partition (the key's).
	var recs []*kgo.Record
	for _, s := range sentences {
		for _, w := range strings.Fields(s) {
			recs = append(recs, &kgo.Record{Topic: in, Key: []byte(w), Value: []byte(w)})
		}
	}
	if err := admCl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("producing input: %w", err)
	}
	fmt.Printf("produced %d words to %s\n", len(recs), in)

	// The transformer: one state (an int) per word.
	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, count int, emit *transformer.Emitter[int]) error {
		count++
		emit.SetState(count)
		emit.Send(out, rec.Key, []byte(strconv.Itoa(count)))
		return nil
	})

	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	stateDir, err := os.MkdirTemp("", "wordcount-state-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	r, err := runner.NewTransformer(counter,
		runner.SeedBrokers(seeds...),
		runner.ApplicationID(app),
		runner.InputTopics(in),
		runner.StateDir(stateDir),
		runner.WithLogger(logger),
	)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	// Wait until the group's committed offsets reach the input's end.
	if err := waitLagZero(ctx, adm, app, in, done); err != nil {
		stop()
		<-done
		return err
	}
	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("runner: %w", err)
	}

	counts, n, err := readCounts(ctx, seeds, out)
	if err != nil {
		return err
	}
	fmt.Printf("read %d committed outputs from %s; final counts:\n", n, out)
	words := make([]string, 0, len(counts))
	for w := range counts {
		words = append(words, w)
	}
	sort.Strings(words)
	for _, w := range words {
		fmt.Printf("  %-8s %d\n", w, counts[w])
	}
	return nil
}

func waitLagZero(ctx context.Context, adm *kadm.Client, group, topic string, done <-chan error) error {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	for {
		lag := int64(0)
		committed, err := adm.FetchOffsets(ctx, group)
		if err == nil || errors.Is(err, kerr.GroupIDNotFound) {
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := committed.Lookup(topic, o.Partition)
				if !ok || c.At < 0 {
					lag += o.Offset
				} else {
					lag += o.Offset - c.At
				}
			})
			if lag == 0 {
				return nil
			}
		}
		select {
		case err := <-done:
			return fmt.Errorf("runner stopped early: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the runner to commit all input: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readCounts reads the committed outputs (read_committed) up to the last
// stable offsets and keeps the last count per word.
func readCounts(ctx context.Context, seeds []string, topic string) (map[string]int, int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Transaction markers take offsets too; keeping them lets us see
		// the record at the last stable offset - 1 and know we are done.
		kgo.KeepControlRecords())
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, 0, err
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	counts := map[string]int{}
	n := 0
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return nil, 0, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				delete(left, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			c, _ := strconv.Atoi(string(r.Value))
			counts[string(r.Key)] = max(counts[string(r.Key)], c)
			n++
		})
	}
	return counts, n, nil
}
