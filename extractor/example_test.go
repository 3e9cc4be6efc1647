package extractor_test

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/runner"
)

// A feed config names its source; the cursor is the next item to read.
type feed struct{ Size int }

type position struct{ Next int }

func Example_run() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1))
	defer cluster.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	defer cl.Close()
	ctx := context.Background()
	kadm.NewClient(cl).CreateTopics(ctx, 2, -1, nil, "feeds", "entries")
	cl.ProduceSync(ctx,
		&kgo.Record{Topic: "feeds", Key: []byte("news"), Value: []byte(`{"Size":5}`)},
		&kgo.Record{Topic: "feeds", Key: []byte("weather"), Value: []byte(`{"Size":3}`)},
	)

	// Two items per page; each page commits with the cursor after it.
	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[feed], cur position, out *extractor.Emitter[position]) error {
		for cur.Next < cfg.Config.Size {
			for i := cur.Next; i < min(cur.Next+2, cfg.Config.Size); i++ {
				out.Send("entries", cfg.Key, fmt.Appendf(nil, "%s #%d", cfg.Key, i))
			}
			cur.Next = min(cur.Next+2, cfg.Config.Size)
			if err := out.Commit(ctx, cur); err != nil {
				return err
			}
		}
		return nil
	})
	r, err := runner.NewExtractor(ex,
		runner.SeedBrokers(cluster.ListenAddrs()...),
		runner.ApplicationID("feeds-example"),
		runner.ConfigTopics("feeds"),
		runner.PollInterval(time.Minute),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	// Read the entries as a read_committed consumer.
	reader, _ := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumeTopics("entries"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer reader.Close()
	var got []string
	for len(got) < 8 {
		reader.PollFetches(ctx).EachRecord(func(rec *kgo.Record) { got = append(got, string(rec.Value)) })
	}
	stop()
	fmt.Println("run:", <-done)
	sort.Strings(got)
	for _, v := range got {
		fmt.Println(v)
	}
	// Output:
	// run: <nil>
	// news #0
	// news #1
	// news #2
	// news #3
	// news #4
	// weather #0
	// weather #1
	// weather #2
}
