// Command sessions groups users' clicks into sessions exactly once: a
// session closes after 30 minutes without a click of its user, in event
// time (the clicks' own timestamps), through a per-user timer; a user's
// state not written for a day of wall-clock time expires (state TTL), so
// sessions of a partition whose input stopped close too and the store
// never grows without bound.
//
// With no flags it starts an embedded Kafka broker (kfake) on 127.0.0.1,
// creates its topics, produces a morning of clicks, runs the stage until
// every click is committed, prints the sessions read back with a
// read_committed consumer, and exits 0. With -brokers it runs against a
// real cluster (creating its topics if missing).
//
//	go run ./examples/sessions
//	go run ./examples/sessions -brokers localhost:9092
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// Gap closes a session; TTL expires a user's state.
const (
	Gap = 30 * time.Minute
	TTL = 24 * time.Hour
)

// click is one click of the input: user, page and minutes after 9:00.
type click struct {
	user, page string
	min        int
}

var morning = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// clicks: ana has two sessions (a 45-minute pause), bo one, cy one.
var clicks = []click{
	{"ana", "/", 0}, {"bo", "/", 1}, {"ana", "/shoes", 3}, {"cy", "/", 5},
	{"ana", "/cart", 10}, {"bo", "/help", 12}, {"cy", "/hats", 20},
	{"ana", "/", 55}, {"ana", "/socks", 60},
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated Kafka brokers; empty starts an embedded broker")
	app := flag.String("app", "sessions", "application id")
	in := flag.String("in", "clicks", "input topic (key: user, value: page)")
	out := flag.String("out", "user-sessions", "output topic (key: user, value: a JSON session summary)")
	partitions := flag.Int("partitions", 3, "partitions of topics this program creates")
	verbose := flag.Bool("v", false, "log what the runner does")
	flag.Parse()
	sessions, err := run(*brokers, *app, *in, *out, int32(*partitions), *verbose)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sessions:", err)
		os.Exit(1)
	}
	for _, s := range sessions {
		fmt.Printf("  %-4s %s-%s %d clicks %s (%s)\n", s.User, s.Start.Format("15:04"), s.End.Format("15:04"), s.Clicks, strings.Join(s.Pages, " "), s.Reason)
	}
}

// run runs the example and returns the sessions it committed, by user
// then start.
func run(brokers, app, in, out string, partitions int32, verbose bool) ([]Summary, error) {
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
	// The producer places every record itself (as the default
	// partitioner would, by key), so that it can also send one record to
	// every partition.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range []string{in, out} {
		if _, err := adm.CreateTopic(ctx, partitions, -1, nil, t); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return nil, fmt.Errorf("creating %s: %w", t, err)
		}
	}

	var recs []*kgo.Record
	for _, c := range clicks {
		recs = append(recs, &kgo.Record{Topic: in, Partition: transformer.Murmur2([]byte(c.user), partitions),
			Key: []byte(c.user), Value: []byte(c.page), Timestamp: morning.Add(time.Duration(c.min) * time.Minute)})
	}
	// At noon a monitoring probe visits every partition: stream time
	// passes every session's gap and they close. (Its own session stays
	// open until its gap or, if nothing follows, its TTL.)
	for p := range partitions {
		recs = append(recs, &kgo.Record{Topic: in, Partition: p, Key: []byte(fmt.Sprintf("probe-%d", p)), Value: []byte("/health"),
			Timestamp: morning.Add(3 * time.Hour)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return nil, fmt.Errorf("producing input: %w", err)
	}
	fmt.Printf("produced %d clicks to %s\n", len(recs), in)

	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	stateDir, err := os.MkdirTemp("", "sessions-state-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stateDir)

	r, err := runner.NewTransformer(newStage(Gap, TTL, out), runner.SeedBrokers(seeds...), runner.ApplicationID(app),
		runner.InputTopics(in), runner.StateDir(stateDir), runner.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	if err := waitLagZero(ctx, adm, app, in, done); err != nil {
		stop()
		<-done
		return nil, err
	}
	stop()
	if err := <-done; err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return readSessions(ctx, seeds, out)
}

// waitLagZero waits until group's committed offsets reach topic's end.
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

// readSessions reads the committed sessions (read_committed) up to the
// last stable offsets, by user then start.
func readSessions(ctx context.Context, seeds []string, topic string) ([]Summary, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Transaction markers take offsets too; keeping them lets us see
		// the record at the last stable offset - 1 and know we are done.
		kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var out []Summary
	var decodeErr error
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return nil, err
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
			var s Summary
			if err := json.Unmarshal(r.Value, &s); err != nil {
				decodeErr = errors.Join(decodeErr, fmt.Errorf("output at offset %d: %w", r.Offset, err))
				return
			}
			out = append(out, s)
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].User != out[j].User {
			return out[i].User < out[j].User
		}
		return out[i].Start.Before(out[j].Start)
	})
	return out, decodeErr
}
