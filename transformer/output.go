package transformer

import (
	"errors"
	"fmt"
	"time"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// PartitionFunc chooses the partition of an output record of a topic from
// its key and the topic's partition count: a result outside [0,
// partitions) fails the task's transaction with an *flechtwerk.OutputError
// (flechtwerk.CodeOutputPartition), and so does a panic (recovered: the
// error's chain holds the *flechtwerk.PanicError). It runs concurrently,
// on the producer's goroutines, for every record
// of its topic without an explicit partition (ToPartition), also for those
// without a key (key nil).
type PartitionFunc func(key []byte, partitions int32) int32

// Murmur2 is Kafka's default partitioner for records with a key: murmur2 of
// the key, the sign bit masked, modulo partitions. Outputs of a topic
// without a PartitionFunc are partitioned so, which keeps them
// co-partitioned with what Java producers write. A nil key hashes like
// an empty one (set as a PartitionFunc, Murmur2 thus sends every record
// without a key to one partition); the default partitioning does not
// call it for them: it sends records without a key to one partition per
// produce batch (franz-go's sticky partitioner), as Kafka's producer does.
func Murmur2(key []byte, partitions int32) int32 {
	return int32(murmur2(key)&0x7fffffff) % partitions
}

// Sender is what a typed output is sent through: an *Outputs, or the
// *Emitter of a stateful transform (it embeds its Outputs).
type Sender interface{ outputs() *Outputs }

func (o *Outputs) outputs() *Outputs { return o }

// Declaration is an output topic a stage declares with Produces: an
// *OutputTopic.
type Declaration interface{ declaration() *declared }

// declared is the untyped part of an OutputTopic.
type declared struct {
	topic      string
	create     bool
	partitions int32
	config     map[string]string
	partition  PartitionFunc
	codecs     [2]any // key, value
	err        error
}

// OutputOpt configures an output topic declaration (DeclareOutput).
type OutputOpt interface{ applyOutput(*declared) }

type outputOpt func(*declared)

func (f outputOpt) applyOutput(d *declared) { f(d) }

// CreateTopic asks the runner to create the output topic at Run's start
// when it does not exist, with partitions partitions and the topic
// configs in config (e.g. "retention.ms"; nil for the broker's defaults),
// at the changelog's replication factor
// (runner.ChangelogReplicationFactor; the broker's default unless set). An existing
// topic with another partition count fails Run at start
// (flechtwerk.CodePartitionMismatch). Without it the topic must exist,
// else Run fails at start with flechtwerk.CodeMissingTopic. partitions
// must be positive. transformertest partitions the topic's outputs over
// partitions.
func CreateTopic(partitions int32, config map[string]string) OutputOpt {
	return outputOpt(func(d *declared) {
		d.create, d.partitions = true, partitions
		d.config = make(map[string]string, len(config))
		for k, v := range config {
			d.config[k] = v
		}
	})
}

// PartitionBy sets the partitioner of the output topic's records (those
// without ToPartition). The default is Murmur2 (records without a key:
// see Murmur2).
func PartitionBy(fn PartitionFunc) OutputOpt {
	return outputOpt(func(d *declared) { d.partition = fn })
}

// OutputTopic is an output topic declared once with the codecs of its
// keys and values (Kafka Streams' Produced.with): transforms send typed
// keys and values through it. List it in the stage's Produces option: Run
// then checks at start that the topic exists (or creates it, CreateTopic)
// and opens the codecs that implement flechtwerk.Lifecycle before the
// first record. Build it with DeclareOutput; it is immutable and safe for
// concurrent use.
type OutputTopic[K, V any] struct {
	d     declared
	key   Codec[K]
	value Codec[V]
}

// TypedOutput is an output record of an OutputTopic with a typed key and
// value; Headers, Timestamp and ToPartition are Output's.
type TypedOutput[K, V any] struct {
	Key     K
	Value   V
	Headers []Header
	// Timestamp is the record's timestamp; the zero time: the input
	// record's.
	Timestamp time.Time

	partition    int32
	hasPartition bool
}

// ToPartition returns o sent to partition p (see Output.ToPartition).
func (o TypedOutput[K, V]) ToPartition(p int32) TypedOutput[K, V] {
	o.partition, o.hasPartition = p, true
	return o
}

// DeclareOutput declares the output topic topic, whose keys key encodes and
// whose values value encodes. Problems (an empty topic, a nil codec, a
// partition count that is not positive) are reported by the Validate of
// the stage that lists it in Produces, as *flechtwerk.ConfigError values.
func DeclareOutput[K, V any](topic string, key Codec[K], value Codec[V], opts ...OutputOpt) *OutputTopic[K, V] {
	t := &OutputTopic[K, V]{d: declared{topic: topic, codecs: [2]any{key, value}}, key: key, value: value}
	for _, o := range opts {
		o.applyOutput(&t.d)
	}
	var errs []error
	field := "output topic " + topic
	if topic == "" {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "DeclareOutput", "the output topic is empty"))
	}
	if key == nil || isNil(key) {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, field, "the key codec is nil"))
	}
	if value == nil || isNil(value) {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, field, "the value codec is nil"))
	}
	if t.d.create && t.d.partitions <= 0 {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, field, "CreateTopic: partition count %d is not positive", t.d.partitions))
	}
	t.d.err = errors.Join(errs...)
	return t
}

func (t *OutputTopic[K, V]) declaration() *declared { return &t.d }

// Topic returns the topic's name.
func (t *OutputTopic[K, V]) Topic() string { return t.d.topic }

// Send encodes key and value and sends them to the topic through out. An
// encode error is returned as an *flechtwerk.OutputError
// (flechtwerk.CodeOutputEncode) naming the topic, nothing is sent, and the
// transform call fails with it even when the transform returns nil: an
// output is never dropped. Sending through an OutputTopic the stage does
// not list in Produces (a stage without Produces included, and an
// Outputs not handed to a transform by a stage) fails the call too
// (flechtwerk.CodeInvalidTransformer): the topic would not have been
// checked at start, nor its PartitionBy applied.
func (t *OutputTopic[K, V]) Send(out Sender, key K, value V) error {
	o := out.outputs()
	k, v, err := t.encode(o, key, value)
	if err != nil {
		return err
	}
	o.outs = append(o.outs, Output{Topic: t.d.topic, Key: k, Value: v})
	return nil
}

// SendRecord is Send for a record with headers, a timestamp or an explicit
// partition.
func (t *OutputTopic[K, V]) SendRecord(out Sender, rec TypedOutput[K, V]) error {
	o := out.outputs()
	k, v, err := t.encode(o, rec.Key, rec.Value)
	if err != nil {
		return err
	}
	o.outs = append(o.outs, Output{Topic: t.d.topic, Key: k, Value: v, Headers: rec.Headers, Timestamp: rec.Timestamp,
		partition: rec.partition, hasPartition: rec.hasPartition})
	return nil
}

// encode checks that o's stage declares t and encodes key and value; an
// error is also recorded as o's failure.
func (t *OutputTopic[K, V]) encode(o *Outputs, key K, value V) ([]byte, []byte, error) {
	if !o.declares(&t.d) {
		return nil, nil, o.fail(flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "output topic "+t.d.topic,
			"sent through an OutputTopic the stage does not declare (transformer.Produces)"))
	}
	k, err := t.key.Encode(key)
	if err != nil {
		return nil, nil, o.fail(&flechtwerk.OutputError{Code: flechtwerk.CodeOutputEncode, Topic: t.d.topic, Err: fmt.Errorf("encoding key: %w", err)})
	}
	v, err := t.value.Encode(value)
	if err != nil {
		return nil, nil, o.fail(&flechtwerk.OutputError{Code: flechtwerk.CodeOutputEncode, Topic: t.d.topic, Err: fmt.Errorf("encoding value: %w", err)})
	}
	return k, v, nil
}

// Decode decodes the key and value of an output of the topic (for tests:
// see transformertest.Outputs).
func (t *OutputTopic[K, V]) Decode(o Output) (K, V, error) {
	var (
		k K
		v V
	)
	k, err := t.key.Decode(o.Key)
	if err != nil {
		return k, v, errors.Join(errors.New("transformer: decoding key of topic "+t.d.topic), err)
	}
	v, err = t.value.Decode(o.Value)
	if err != nil {
		return k, v, errors.Join(errors.New("transformer: decoding value of topic "+t.d.topic), err)
	}
	return k, v, nil
}

// fail records err as the call's failure, unless one is recorded, and
// returns it.
func (o *Outputs) fail(err error) error {
	if o.err == nil {
		o.err = err
	}
	return err
}

// declares reports whether d is one of the stage's declarations.
func (o *Outputs) declares(d *declared) bool {
	for _, x := range o.decls {
		if x == d {
			return true
		}
	}
	return false
}

// Produces declares the stage's typed output topics: Run checks each at
// start (see OutputTopic), and transforms may send only through these.
// A topic declared twice, or with a PartitionBy while a Partitioner option
// names it too, is reported by Validate.
func Produces(outs ...Declaration) Opt {
	return optFunc(func(c *cfg) { c.decls = append(c.decls, outs...) })
}

// Partitioner sets the partitioner of topic's output records (those
// without ToPartition), declared or not; the default is Murmur2.
func Partitioner(topic string, fn PartitionFunc) Opt {
	return optFunc(func(c *cfg) {
		if c.partitioners == nil {
			c.partitioners = map[string]PartitionFunc{}
		}
		c.partitioners[topic] = fn
	})
}

// InputHeaders carries the headers of each input record onto every output
// of its transform call: the input's headers first, then the output's own.
func InputHeaders() Opt {
	return optFunc(func(c *cfg) { c.inputHeaders = true })
}

// outputsOf checks the declarations and partitioners of c and sets them on
// t; it returns every problem found.
func (o *outputSpec) build(c cfg) error {
	var errs []error
	seen := map[string]bool{}
	for _, x := range c.decls {
		if x == nil || isNil(x) {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidTransformer, "Produces", "a declared output is nil"))
			continue
		}
		d := x.declaration()
		if d.err != nil {
			errs = append(errs, d.err)
		}
		if seen[d.topic] {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeDuplicateTopic, "output topic "+d.topic, "declared twice (Produces)"))
		}
		seen[d.topic] = true
		o.decls = append(o.decls, d)
		if d.partition != nil {
			if _, dup := c.partitioners[d.topic]; dup {
				errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "output topic "+d.topic,
					"has a partitioner from both PartitionBy and the Partitioner option"))
			}
			o.addPartitioner(d.topic, d.partition)
		}
	}
	for topic, fn := range c.partitioners {
		if topic == "" || fn == nil {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Partitioner", "topic %q: empty topic or nil function", topic))
			continue
		}
		o.addPartitioner(topic, fn)
	}
	o.inputHeaders = c.inputHeaders
	return errors.Join(errs...)
}

// outputSpec is what a stage knows of its outputs.
type outputSpec struct {
	decls        []*declared
	partitioners map[string]func(key []byte, partitions int32) int32
	inputHeaders bool
}

func (o *outputSpec) addPartitioner(topic string, fn PartitionFunc) {
	if o.partitioners == nil {
		o.partitioners = map[string]func([]byte, int32) int32{}
	}
	o.partitioners[topic] = fn
}

// specs returns the engine's view of the declarations.
func (o *outputSpec) specs() []stage.OutputSpec {
	if len(o.decls) == 0 {
		return nil
	}
	out := make([]stage.OutputSpec, len(o.decls))
	for i, d := range o.decls {
		out[i] = stage.OutputSpec{Topic: d.topic, Create: d.create, Partitions: d.partitions, Config: d.config}
	}
	return out
}

// murmur2 is Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2).
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		b = b[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
