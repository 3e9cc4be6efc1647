package sink

import (
	"context"
	"time"

	"github.com/flechtwerk/flechtwerk/internal/engine/sink/acks"
	"github.com/flechtwerk/flechtwerk/internal/group"
	imetrics "github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/store"
)

// write writes the outputs of partition tp under the SinkRetry policy
// (once without one), recording each Write call.
func (sr *sinkRun) write(ctx context.Context, tp acks.TopicPartition, outs []stage.Output) error {
	m := sr.c.Metrics
	return sr.c.Retry.Sink.Do(ctx, func() error {
		began := time.Now()
		err := sr.snk.Write(ctx, outs)
		m.SinkWrite(tp.Topic, tp.Partition, len(outs), time.Since(began), err)
		return err
	}, func(err error, wait time.Duration) {
		m.SinkRetried(tp.Topic, tp.Partition)
		sr.c.Logger.Warn("sink write failed with a transient error, retrying", "topic", tp.Topic, "partition", tp.Partition,
			"outputs", len(outs), "wait", wait, "err", err)
	})
}

// sinkSource is the scrape-time metrics source of a sink: the lag of its
// group.
type sinkSource struct{ sr *sinkRun }

// Lag returns the lag of every partition of the input topics, whichever
// instance reads it.
func (s sinkSource) Lag(ctx context.Context) (map[imetrics.TP]int64, error) {
	return group.Lag(ctx, s.sr.adm, s.sr.c.Group(), s.sr.c.InputTopics)
}

func (sinkSource) Stores(func(int32, *store.Store)) {}

func (sinkSource) Configs() (int, func([]byte) bool) { return 0, nil }
