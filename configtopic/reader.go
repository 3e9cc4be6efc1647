package configtopic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/flechtwerk/flechtwerk/internal/topics"
)

// Run reads the config topics until ctx is done (it then returns nil) or an
// error ends it: a missing topic (*flechtwerk.ConfigError, CodeMissingTopic),
// an undecodable record (*RecordError) or a fetch error. Run must be called
// once; a second call returns an error.
func (t *Table[C]) Run(ctx context.Context) error {
	select {
	case <-t.ran:
		return errors.New("configtopic: Run called twice")
	default:
		close(t.ran)
	}
	err := t.run(ctx)
	t.runErr = err
	close(t.done)
	return err
}

func (t *Table[C]) run(ctx context.Context) error {
	c := &t.cfg
	base := append([]kgo.Opt{kgo.SeedBrokers(c.brokers...), kgo.WithLogger(kslog.New(c.logger))}, c.kafkaOpts...)
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("configtopic: admin client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	t.cl, t.adm = admCl, adm // read by Sync once Ready is closed

	var errs []error
	for _, name := range c.topics {
		// One topic at a time: a Table may read topics of different
		// partition counts.
		if _, _, err := topics.Describe(ctx, adm, "config", []string{name}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	parts, err := t.targets(ctx, adm)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := t.bootstrap(ctx, admCl, parts); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	t.markReady()

	// The live consumer starts where the bootstrap stopped: at the last
	// stable offsets listed before it. Partitions added later are read
	// from their start.
	start := map[string]map[int32]kgo.Offset{}
	for _, p := range parts {
		if start[p.topic] == nil {
			start[p.topic] = map[int32]kgo.Offset{}
		}
		start[p.topic][p.partition] = kgo.NewOffset().At(p.end)
	}
	cl, err := kgo.NewClient(append(slices.Clone(base),
		kgo.ConsumePartitions(start),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers move the Table's position (see Sync)
		// like records do; they are not configs.
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("configtopic: consumer: %w", err)
	}
	defer cl.Close()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go t.watchPartitions(watchCtx, adm, cl, parts)

	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("configtopic: fetching topic %s partition %d: %w", topic, p, readACL(err, topic))
			}
		})
		if ferr != nil {
			return ferr
		}
		var changes []change[C]
		var rerr error
		pos := map[partition]int64{}
		fs.EachRecord(func(r *kgo.Record) {
			if rerr != nil {
				return
			}
			if r.Attrs.IsControl() {
				pos[partition{r.Topic, r.Partition}] = r.Offset + 1
				return
			}
			if r.Key == nil {
				rerr = errNoKey(r)
				return
			}
			if r.Value == nil {
				changes = append(changes, change[C]{key: string(r.Key), del: true})
				pos[partition{r.Topic, r.Partition}] = r.Offset + 1
				return
			}
			rec := toRecord(r)
			v, err := t.decode(ctx, rec)
			if err != nil {
				rerr = &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Err: err}
				return
			}
			changes = append(changes, change[C]{key: string(r.Key), entry: Entry[C]{Record: *rec, Config: v}})
			pos[partition{r.Topic, r.Partition}] = r.Offset + 1
		})
		// The records before a bad one are applied: the Table keeps
		// what it had before the bad record.
		t.apply(changes, pos)
		if rerr != nil {
			if ctx.Err() != nil {
				return nil
			}
			return rerr
		}
	}
}

type change[C any] struct {
	key   string
	entry Entry[C]
	del   bool
}

// partition is one partition of a config topic.
type partition struct {
	topic     string
	partition int32
}

// apply installs changes in order and signals Changed, and moves the
// positions to pos (the offsets the changes were read up to) in the same
// step: a position never runs ahead of the entries.
func (t *Table[C]) apply(changes []change[C], pos map[partition]int64) {
	if len(changes) == 0 && len(pos) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ch := range changes {
		if ch.del {
			delete(t.entries, ch.key)
		} else {
			t.entries[ch.key] = ch.entry
		}
	}
	if len(changes) > 0 {
		close(t.changed)
		t.changed = make(chan struct{})
	}
	moved := false
	for p, o := range pos {
		if cur, ok := t.pos[p]; !ok || o > cur {
			t.pos[p] = o
			moved = true
		}
	}
	if moved {
		close(t.moved)
		t.moved = make(chan struct{})
	}
}

func errNoKey(r *kgo.Record) error {
	return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Err: errors.New("config record has no key")}
}

// bootstrap reads every partition from its start up to the end listed in
// parts, keeps the last record of every key, and only then decodes and
// enriches the values that survive: a value replaced later in the log is
// never decoded (so a bad value that was replaced cannot stop the Table)
// and Enrich runs once per live key.
func (t *Table[C]) bootstrap(ctx context.Context, cl *kgo.Client, parts []partRange) error {
	type latest struct {
		order int // of the partition in parts, for a deterministic merge
		rec   *kgo.Record
	}
	var (
		mu   sync.Mutex
		last = map[string]latest{}
	)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, p := range parts {
		if p.end <= p.start {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			// The last record per key of this partition, in offset order.
			mine := map[string]*kgo.Record{}
			var superseded []*kgo.Record
			err := readRange(ctx, cl, p.topic, p.partition, p.start, p.end, func(r *kgo.Record) error {
				t.stats.bootstrapRecords.Add(1)
				if r.Key == nil {
					return errNoKey(r)
				}
				if prev := mine[string(r.Key)]; prev != nil {
					superseded = append(superseded, prev)
				}
				mine[string(r.Key)] = r
				return nil
			})
			if err != nil {
				cancel(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for k, r := range mine {
				// Across topics the later partition in parts wins;
				// the order between topics is not defined.
				if prev, ok := last[k]; ok {
					if prev.order > i {
						superseded = append(superseded, r)
						continue
					}
					superseded = append(superseded, prev.rec)
				}
				last[k] = latest{order: i, rec: r}
			}
			for _, r := range superseded {
				if r.Value == nil {
					continue
				}
				t.stats.superseded.Add(1)
				t.cfg.logger.Debug("config record superseded during bootstrap, not decoded",
					"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "key", string(r.Key))
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}

	// Decode and enrich the survivors in a stable order (topic order of
	// Topics, then partition, then offset), so the first bad one is the
	// one reported.
	recs := make([]latest, 0, len(last))
	for _, l := range last {
		if l.rec.Value != nil {
			recs = append(recs, l)
		}
	}
	slices.SortFunc(recs, func(a, b latest) int {
		if a.order != b.order {
			return a.order - b.order
		}
		return int(a.rec.Offset - b.rec.Offset)
	})
	changes := make([]change[C], 0, len(recs))
	for _, l := range recs {
		rec := toRecord(l.rec)
		v, err := t.decode(ctx, rec)
		if err != nil {
			return &RecordError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Err: err}
		}
		changes = append(changes, change[C]{key: string(rec.Key), entry: Entry[C]{Record: *rec, Config: v}})
	}
	// The bootstrap read every partition up to its end.
	pos := make(map[partition]int64, len(parts))
	for _, p := range parts {
		pos[partition{p.topic, p.partition}] = max(p.end, p.start)
	}
	t.apply(changes, pos)
	return nil
}

// watchPartitions adds partitions created in the config topics after Run
// started to the live consumer, read from their start.
func (t *Table[C]) watchPartitions(ctx context.Context, adm *kadm.Client, cl *kgo.Client, parts []partRange) {
	known := map[string]map[int32]bool{}
	for _, p := range parts {
		if known[p.topic] == nil {
			known[p.topic] = map[int32]bool{}
		}
		known[p.topic][p.partition] = true
	}
	tick := time.NewTicker(t.cfg.partitionCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		md, err := adm.Metadata(ctx, t.cfg.topics...)
		if err != nil {
			continue // the next tick tries again
		}
		add := map[string]map[int32]kgo.Offset{}
		for name, td := range md.Topics {
			if known[name] == nil || td.Err != nil {
				continue
			}
			for p := range td.Partitions {
				if !known[name][p] {
					known[name][p] = true
					if add[name] == nil {
						add[name] = map[int32]kgo.Offset{}
					}
					add[name][p] = kgo.NewOffset().AtStart()
				}
			}
		}
		if len(add) > 0 {
			t.cfg.logger.Info("config topic partitions added", "partitions", add)
			cl.AddConsumePartitions(add)
		}
	}
}

func (t *Table[C]) markReady() {
	t.readyOnce.Do(func() {
		t.cfg.logger.Info("config table ready", "topics", t.cfg.topics, "configs", t.Len(),
			"records", t.stats.bootstrapRecords.Load(), "superseded", t.stats.superseded.Load())
		close(t.ready)
	})
}

func (t *Table[C]) decode(ctx context.Context, rec *Record) (C, error) {
	v, err := t.decoder.Decode(rec.Value)
	if err != nil {
		return v, fmt.Errorf("decoding: %w", err)
	}
	if t.enrich != nil {
		if v, err = t.enrich(ctx, rec, v); err != nil {
			return v, fmt.Errorf("enriching: %w", err)
		}
	}
	return v, nil
}

// partRange is one config partition and the offsets the bootstrap reads:
// from its log start up to its last stable offset listed when Run started.
type partRange struct {
	topic      string
	partition  int32
	start, end int64
}

// targets lists every partition of the config topics with its log start
// and last stable offset, in the order of Topics, then by partition.
func (t *Table[C]) targets(ctx context.Context, adm *kadm.Client) ([]partRange, error) {
	starts, err := adm.ListStartOffsets(ctx, t.cfg.topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("configtopic: start offsets of %v: %w", t.cfg.topics, readACL(err, strings.Join(t.cfg.topics, ",")))
	}
	ends, err := adm.ListCommittedOffsets(ctx, t.cfg.topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("configtopic: last stable offsets of %v: %w", t.cfg.topics, readACL(err, strings.Join(t.cfg.topics, ",")))
	}
	var out []partRange
	for _, name := range t.cfg.topics {
		var ps []partRange
		for p, o := range ends[name] {
			s, _ := starts.Lookup(name, p)
			ps = append(ps, partRange{topic: name, partition: p, start: s.Offset, end: o.Offset})
		}
		slices.SortFunc(ps, func(a, b partRange) int { return int(a.partition - b.partition) })
		out = append(out, ps...)
	}
	return out, nil
}

func toRecord(r *kgo.Record) *Record {
	rec := &Record{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
	}
	if len(r.Headers) > 0 {
		rec.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return rec
}
