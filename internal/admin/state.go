package admin

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/lso"
	"github.com/flechtwerk/flechtwerk/store"
)

// StateValue is the result of state get APP KEY (its --json form).
type StateValue struct {
	App string `json:"app"`
	// Store is the named store read (--store), empty for the default one.
	Store     string `json:"store,omitempty"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// PartitionFrom is "hash" (murmur2 of the key over the changelog's
	// partitions) or "flag" (--partition).
	PartitionFrom string `json:"partition_from"`
	Key           string `json:"key"`
	Found         bool   `json:"found"`
	// ReadTo is the last stable offset the partition was read up to.
	ReadTo int64 `json:"read_to"`
	// Value is the value when it is JSON (the default state codec);
	// otherwise ValueString (UTF-8) or ValueBase64 holds it.
	Value       json.RawMessage `json:"value,omitempty"`
	ValueString *string         `json:"value_string,omitempty"`
	ValueBase64 []byte          `json:"value_base64,omitempty"`

	raw []byte
}

func stateGetCmd(ctx context.Context, args []string, env Env) error {
	var c common
	fs := newFlags("state get", env, &c)
	partition := fs.Int("partition", -1, "changelog partition `N` to read (default: murmur2 hash of KEY over the changelog's partitions)")
	isHex := fs.Bool("hex", false, "KEY is hex encoded")
	storeName := fs.String("store", "", "read the named store `NAME` (changelog {APP}-{NAME}-changelog; \"timers\": the timer store) instead of the default one")
	pos, err := parse(fs, args, 2, "APP KEY")
	if err != nil {
		return err
	}
	app, key := pos[0], []byte(pos[1])
	if *isHex {
		if key, err = hex.DecodeString(pos[1]); err != nil {
			return usagef("state get: KEY %q is not hex: %v", pos[1], err)
		}
	}
	if *partition < -1 || *partition > 1<<31-1 {
		return usagef("state get: --partition %d out of range", *partition)
	}
	if *storeName != "" && !store.ValidName(*storeName) {
		return usagef("state get: --store %q is no store name (1 to 64 of a-z, 0-9, '_', '-', starting with a letter or digit)", *storeName)
	}
	adm, closeFn, err := c.connect()
	if err != nil {
		return err
	}
	defer closeFn()
	opts, _ := c.opts()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	sv, err := GetStoreState(ctx, adm, app, *storeName, key, int32(*partition), opts...)
	if err != nil {
		return fmt.Errorf("state get %s (brokers %s): %w", app, c.brokers, err)
	}
	if c.json {
		if err := writeJSON(env.Stdout, sv); err != nil {
			return err
		}
	} else if sv.Found {
		if _, err := env.Stdout.Write(append(sv.raw, '\n')); err != nil {
			return err
		}
	}
	if !sv.Found {
		return fmt.Errorf("state get %s: key %q has no committed state in %s partition %d (read to offset %d; partition chosen by %s — use --partition if the state key is not the record key or inputs are not written with the default partitioner)",
			app, key, sv.Topic, sv.Partition, sv.ReadTo, sv.PartitionFrom)
	}
	return nil
}

// GetState reads key's committed state of application app from its
// changelog partition: partition if it is not negative, else the partition
// Kafka's default partitioner (murmur2) puts key on among the changelog's
// partitions. That is the task's partition when the state key is the
// record key and the inputs were written with the default partitioner.
//
// The partition is streamed read_committed from the log start to the last
// stable offset, keeping only the key's last write: a tombstone means
// absent. Nothing is written to disk. opts are the read client's options
// (seed brokers, TLS, SASL).
func GetState(ctx context.Context, adm *kadm.Client, app string, key []byte, partition int32, opts ...kgo.Opt) (*StateValue, error) {
	return GetStoreState(ctx, adm, app, "", key, partition, opts...)
}

// GetStoreState is GetState for the named store storeName of app (its
// changelog changelog.StoreTopic(app, storeName)); "" is the default
// store.
func GetStoreState(ctx context.Context, adm *kadm.Client, app, storeName string, key []byte, partition int32, opts ...kgo.Opt) (*StateValue, error) {
	topic := changelog.Topic(app)
	if storeName != "" {
		topic = changelog.StoreTopic(app, storeName)
	}
	sv := &StateValue{App: app, Store: storeName, Topic: topic, Key: string(key)}
	var (
		v     []byte
		found bool
	)
	err := scanChangelog(ctx, adm, storeName, topic, key, partition, &sv.Partition, &sv.PartitionFrom, &sv.ReadTo, func(r *kgo.Record) {
		if bytes.Equal(r.Key, key) {
			v, found = r.Value, r.Value != nil // nil: a tombstone
		}
	}, opts...)
	if err != nil {
		return nil, err
	}
	if !found {
		return sv, nil
	}
	v = bytes.Clone(v)
	sv.Found, sv.raw = true, v
	switch {
	case json.Valid(v):
		sv.Value = v
	case utf8.Valid(v):
		s := string(v)
		sv.ValueString = &s
	default:
		sv.ValueBase64 = v
	}
	return sv, nil
}

// scanChangelog calls fn for every committed record of a partition of
// topic (the changelog of store storeName, "" the default one) from the
// log start to the last stable offset, in offset order. The partition is
// partition if it is not negative, else key's murmur2 hash over the
// topic's partitions; it sets *part, *from ("flag" or "hash") and *readTo
// (the last stable offset) before reading.
func scanChangelog(ctx context.Context, adm *kadm.Client, storeName, topic string, key []byte, partition int32,
	part *int32, from *string, readTo *int64, fn func(*kgo.Record), opts ...kgo.Opt) error {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("listing changelog topic %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		if storeName != "" {
			return fmt.Errorf("changelog topic %s of store %q does not exist (no such store, a wrong APP, or deleted by reset --state)", topic, storeName)
		}
		return fmt.Errorf("changelog topic %s does not exist (a stateless application, a wrong APP, or deleted by reset --state)", topic)
	}
	if d.Err != nil {
		return fmt.Errorf("listing changelog topic %s: %w", topic, d.Err)
	}
	n := int32(len(d.Partitions))
	*part, *from = partition, "flag"
	if partition < 0 {
		*part, *from = extractor.Token(key, n), "hash"
	} else if partition >= n {
		return fmt.Errorf("--partition %d: changelog topic %s has %d partitions", partition, topic, n)
	}
	stable, err := listOffsets(ctx, "last stable", adm.ListCommittedOffsets, topic)
	if err != nil {
		return err
	}
	starts, err := listOffsets(ctx, "start", adm.ListStartOffsets, topic)
	if err != nil {
		return err
	}
	var start int64
	if o, ok := stable.Lookup(topic, *part); ok {
		*readTo = o.Offset
	}
	if o, ok := starts.Lookup(topic, *part); ok {
		start = o.Offset
	}
	if start >= *readTo {
		return nil
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("read client for %s: %w", topic, err)
	}
	defer cl.Close()
	return lso.ReadRange(ctx, cl, topic, *part, start, *readTo, func(rs []*kgo.Record) error {
		for _, r := range rs {
			fn(r)
		}
		return nil
	}, func(offset int64, err error) error {
		return fmt.Errorf("reading %s partition %d at offset %d: %w", topic, *part, offset, err)
	})
}
