package admin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/stamp"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// TimerList is the result of state timers APP KEY (its --json form).
type TimerList struct {
	App           string `json:"app"`
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	PartitionFrom string `json:"partition_from"`
	Key           string `json:"key"`
	ReadTo        int64  `json:"read_to"`
	// StreamTime is the task's committed stream time (Unix ms), nil when
	// none was written.
	StreamTime *int64        `json:"stream_time,omitempty"`
	Timers     []TimerRecord `json:"timers"`
}

// TimerRecord is one pending timer of the key.
type TimerRecord struct {
	Name string `json:"name"`
	// Kind is "event" (stream time), "wall" (wall clock) or "kind N".
	Kind  string    `json:"kind"`
	DueMs int64     `json:"due_ms"`
	Due   time.Time `json:"due"`
}

func stateTimersCmd(ctx context.Context, args []string, env Env) error {
	var c common
	fs := newFlags("state timers", env, &c)
	partition := fs.Int("partition", -1, "changelog partition `N` to read (default: murmur2 hash of KEY over the changelog's partitions)")
	isHex := fs.Bool("hex", false, "KEY is hex encoded")
	pos, err := parse(fs, args, 2, "APP KEY")
	if err != nil {
		return err
	}
	app, key := pos[0], []byte(pos[1])
	if *isHex {
		if key, err = hex.DecodeString(pos[1]); err != nil {
			return usagef("state timers: KEY %q is not hex: %v", pos[1], err)
		}
	}
	if *partition < -1 || *partition > 1<<31-1 {
		return usagef("state timers: --partition %d out of range", *partition)
	}
	adm, closeFn, err := c.connect()
	if err != nil {
		return err
	}
	defer closeFn()
	opts, _ := c.opts()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	tl, err := GetTimers(ctx, adm, app, key, int32(*partition), opts...)
	if err != nil {
		return fmt.Errorf("state timers %s (brokers %s): %w", app, c.brokers, err)
	}
	if c.json {
		return writeJSON(env.Stdout, tl)
	}
	st := "none"
	if tl.StreamTime != nil {
		st = time.UnixMilli(*tl.StreamTime).UTC().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(env.Stdout, "Timers of key %q in %s partition %d (read to offset %d; stream time %s):\n", tl.Key, tl.Topic, tl.Partition, tl.ReadTo, st)
	tw := table(env.Stdout)
	fmt.Fprintln(tw, "NAME\tKIND\tDUE")
	for _, t := range tl.Timers {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", printableName(t.Name), t.Kind, t.Due.Format(time.RFC3339Nano))
	}
	return tw.Flush()
}

// printableName shows the reserved TTL timer names ("\x00ttl",
// "\x00ttl:STORE") readably.
func printableName(name string) string {
	if rest, ok := strings.CutPrefix(name, "\x00"); ok {
		return "(" + rest + ")"
	}
	return name
}

// GetTimers lists the pending timers of state key key of application app
// and the task's stream time, read from the changelog of its timer store
// (changelog.TimersTopic) like GetState reads state: the partition is
// partition if it is not negative, else key's murmur2 hash over the
// topic's partitions. A timer carried by the key's state
// (process.Stamp.Timers), which the timer store may hold early, is listed
// at the due time the stamp of the key's last state record gives it.
// Timers are in (due, name) order.
func GetTimers(ctx context.Context, adm *kadm.Client, app string, key []byte, partition int32, opts ...kgo.Opt) (*TimerList, error) {
	tl := &TimerList{App: app, Topic: changelog.TimersTopic(app), Key: string(key), Timers: []TimerRecord{}}
	pending := map[string][]byte{}
	var streamTime []byte
	err := scanChangelog(ctx, adm, changelog.TimersName, tl.Topic, key, partition, &tl.Partition, &tl.PartitionFrom, &tl.ReadTo, func(r *kgo.Record) {
		if string(r.Key) == string(store.StreamTimeKey) {
			streamTime = r.Value
			return
		}
		k, name, ok := store.DecodeTimerKey(r.Key)
		if !ok || string(k) != string(key) {
			return
		}
		if r.Value == nil {
			delete(pending, name)
		} else {
			pending[name] = r.Value
		}
	}, opts...)
	if err != nil {
		return nil, err
	}
	if ms, ok := store.DecodeStreamTime(streamTime); ok {
		tl.StreamTime = &ms
	}
	var st process.Stamp
	if len(pending) > 0 {
		if st, err = stateStamp(ctx, adm, app, key, tl.Partition, opts...); err != nil {
			return nil, err
		}
	}
	for name, v := range pending {
		kind, due, ok := store.DecodeTimerValue(v)
		if !ok {
			return nil, fmt.Errorf("timer %q of key %q in %s partition %d: value of %d bytes, want 9", name, key, tl.Topic, tl.Partition, len(v))
		}
		// A timer carried by the key's stamp may be held early.
		ck, due := stamp.Due(st, name, process.TimeKind(kind), due)
		kind = uint8(ck)
		k := fmt.Sprintf("kind %d", kind)
		switch kind {
		case 1:
			k = "event"
		case 2:
			k = "wall"
		}
		tl.Timers = append(tl.Timers, TimerRecord{Name: name, Kind: k, DueMs: due, Due: time.UnixMilli(due).UTC()})
	}
	slices.SortFunc(tl.Timers, func(a, b TimerRecord) int {
		return store.CompareDue(a.DueMs, nil, a.Name, b.DueMs, nil, b.Name)
	})
	return tl, nil
}

// stateStamp reads the stamp of key's last state record in partition
// part of app's changelog (changelog.Topic); the zero stamp when app
// keeps no state there or the key has none.
func stateStamp(ctx context.Context, adm *kadm.Client, app string, key []byte, part int32, opts ...kgo.Opt) (process.Stamp, error) {
	topic := changelog.Topic(app)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return process.Stamp{}, fmt.Errorf("listing changelog topic %s: %w", topic, err)
	}
	if d, ok := td[topic]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return process.Stamp{}, nil
	}
	var (
		sb, from string
		readTo   int64
		p        int32
	)
	err = scanChangelog(ctx, adm, "", topic, key, part, &p, &from, &readTo, func(r *kgo.Record) {
		if string(r.Key) != string(key) {
			return
		}
		sb = ""
		for _, h := range r.Headers {
			if r.Value != nil && h.Key == changelog.StampHeader {
				sb = string(h.Value)
			}
		}
	}, opts...)
	if err != nil {
		return process.Stamp{}, err
	}
	s, _ := stamp.Decode([]byte(sb))
	return s, nil
}
