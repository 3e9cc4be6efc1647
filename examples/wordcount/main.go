// Command wordcount counts words exactly once, as a two-stage pipeline in
// one process: sentences -> split (re-keys each word into a repartition
// topic) -> count (one state per word) -> word counts.
//
// With no flags it starts an embedded Kafka broker (kfake) on 127.0.0.1,
// creates its topics, produces a few sentences, runs the pipeline until
// every sentence and every word is committed, prints the counts read back
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
	app := flag.String("app", "wordcount", "pipeline name; the stages' application ids are {app}-split and {app}-count")
	in := flag.String("in", "sentences", "input topic")
	out := flag.String("out", "word-counts", "output topic")
	partitions := flag.Int("partitions", 3, "partitions of topics this program creates")
	verbose := flag.Bool("v", false, "log what the runner does")
	flag.Parse()
	if _, err := run(*brokers, *app, *in, *out, int32(*partitions), *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		os.Exit(1)
	}
}

// run runs the example and returns the final counts.
func run(brokers, app, in, out string, partitions int32, verbose bool) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	seeds := strings.Split(brokers, ",")
	if brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return nil, err
		}
		defer cluster.Close()
		seeds = cluster.ListenAddrs()
		fmt.Println("embedded broker at", seeds[0])
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	for _, t := range []string{in, out} {
		if _, err := adm.CreateTopic(ctx, partitions, -1, nil, t); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return nil, fmt.Errorf("creating %s: %w", t, err)
		}
	}

	// The producer sends whole sentences, without keys.
	var recs []*kgo.Record
	for _, s := range sentences {
		recs = append(recs, &kgo.Record{Topic: in, Value: []byte(s)})
	}
	if err := admCl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return nil, fmt.Errorf("producing input: %w", err)
	}
	fmt.Printf("produced %d sentences to %s\n", len(recs), in)

	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	stateDir, err := os.MkdirTemp("", "wordcount-state-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stateDir)

	// A two-stage pipeline: split re-keys each word into a repartition
	// topic (keyed by the word, so each word's records land on one
	// partition), count keeps one state (an int) per word.
	p, err := runner.NewPipeline(app, runner.SeedBrokers(seeds...), runner.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	splitApp, countApp := app+"-split", app+"-count"
	words := p.Repartition("words", splitApp, countApp, 0)
	split := transformer.Stateless(func(ctx context.Context, rec *transformer.Record, emit *transformer.Outputs) error {
		for _, w := range strings.Fields(string(rec.Value)) {
			emit.Send(words, []byte(w), []byte(w))
		}
		return nil
	})
	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, count int, emit *transformer.Emitter[int]) error {
		count++
		emit.SetState(count)
		emit.Send(out, rec.Key, []byte(strconv.Itoa(count)))
		return nil
	})
	if _, err := p.AddTransformer(split, runner.ApplicationID(splitApp), runner.InputTopics(in)); err != nil {
		return nil, err
	}
	if _, err := p.AddTransformer(counter, runner.ApplicationID(countApp), runner.InputTopics(words),
		runner.StateDir(stateDir)); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()

	// Wait until each stage's committed offsets reach its input's end:
	// the split stage first, then the words it sent are all in.
	for _, hop := range [][2]string{{splitApp, in}, {countApp, words}} {
		if err := waitLagZero(ctx, adm, hop[0], hop[1], done); err != nil {
			stop()
			<-done
			return nil, err
		}
	}
	stop()
	if err := <-done; err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}

	counts, n, err := readCounts(ctx, seeds, out)
	if err != nil {
		return nil, err
	}
	fmt.Printf("read %d committed outputs from %s; final counts:\n", n, out)
	sorted := make([]string, 0, len(counts))
	for w := range counts {
		sorted = append(sorted, w)
	}
	sort.Strings(sorted)
	for _, w := range sorted {
		fmt.Printf("  %-8s %d\n", w, counts[w])
	}
	return counts, nil
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
