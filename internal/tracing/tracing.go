package tracing

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/flechtwerk/flechtwerk"

// Attribute keys: OpenTelemetry's messaging semantic conventions where
// they name the thing, flechtwerk.* otherwise.
const (
	MessagingSystem        = attribute.Key("messaging.system")
	MessagingOperationType = attribute.Key("messaging.operation.type")
	MessagingOperationName = attribute.Key("messaging.operation.name")
	MessagingDestination   = attribute.Key("messaging.destination.name")
	MessagingPartition     = attribute.Key("messaging.destination.partition.id")
	MessagingConsumerGroup = attribute.Key("messaging.consumer.group.name")
	MessagingOffset        = attribute.Key("messaging.kafka.offset")
	MessagingBatchCount    = attribute.Key("messaging.batch.message_count")
	TaskPartition          = attribute.Key("flechtwerk.task.partition")
	ApplicationID          = attribute.Key("flechtwerk.application.id")
	CommitOutputs          = attribute.Key("flechtwerk.commit.outputs")
	CommitStateWrites      = attribute.Key("flechtwerk.commit.state_writes")
	CommitTopics           = attribute.Key("flechtwerk.commit.topics")
	CommitFirstOffsets     = attribute.Key("flechtwerk.commit.first_offsets")
	CommitLastOffsets      = attribute.Key("flechtwerk.commit.last_offsets")
	CommitLinksDropped     = attribute.Key("flechtwerk.commit.links_dropped")
)

// MaxLinks caps the links of one commit span (the SDK's default link
// limit): a transaction of more records links to its first MaxLinks and
// counts the others in flechtwerk.commit.links_dropped.
const MaxLinks = 128

// Tracer makes the spans of one application's tasks.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	appID  string
}

// New returns the tracer of application appID; prop nil is the W3C trace
// context (traceparent, tracestate). tp nil returns nil: tracing off.
func New(tp trace.TracerProvider, prop propagation.TextMapPropagator, appID string) *Tracer {
	if tp == nil {
		return nil
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracer{tracer: tp.Tracer(ScopeName), prop: prop, appID: appID}
}

// Record starts the span of input record r processed by task partition
// task: a consumer span named "flechtwerk.process <topic>", a child of the
// context the propagator extracts from r's headers (a new trace when they
// carry none), with the record's coordinates as attributes.
func (t *Tracer) Record(ctx context.Context, r *kgo.Record, task int32) (context.Context, trace.Span) {
	ctx = t.prop.Extract(ctx, Headers{&r.Headers})
	return t.tracer.Start(ctx, "flechtwerk.process "+r.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			MessagingSystem.String("kafka"),
			MessagingOperationType.String("process"),
			MessagingOperationName.String("process"),
			MessagingDestination.String(r.Topic),
			MessagingPartition.String(strconv.Itoa(int(r.Partition))),
			MessagingOffset.Int64(r.Offset),
			MessagingConsumerGroup.String(t.appID),
			ApplicationID.String(t.appID),
			TaskPartition.Int(int(task)),
		))
}

// Inject writes the trace context of ctx into the headers of outs,
// replacing the propagator's headers they already carry (an output that
// copied its input's headers continues the record's span, not its
// parent). The context is encoded once; the outputs share the header
// values.
func (t *Tracer) Inject(ctx context.Context, outs []*kgo.Record) {
	if len(outs) == 0 {
		return
	}
	var c collected
	t.prop.Inject(ctx, &c)
	if len(c) == 0 {
		return
	}
	for _, o := range outs {
		o.Headers = replace(o.Headers, c)
	}
}

// End ends a record's span, with err (nil on success) as its status.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Commit describes one transaction commit of a task.
type Commit struct {
	Task        int32
	Records     int
	Outputs     int
	StateWrites int
	// First and Last are the first and last input offsets per topic.
	First, Last map[string]int64
	// Links are the span contexts of the committed records' spans (at
	// most MaxLinks); Dropped counts the ones left out.
	Links   []trace.SpanContext
	Dropped int
}

// StartCommit starts the span of a transaction commit,
// "flechtwerk.commit", linked to the spans of the records it commits.
func (t *Tracer) StartCommit(ctx context.Context, c *Commit) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, len(c.Links))
	for _, sc := range c.Links {
		links = append(links, trace.Link{SpanContext: sc})
	}
	topics := make([]string, 0, len(c.First))
	firsts := make([]int64, 0, len(c.First))
	lasts := make([]int64, 0, len(c.First))
	for topic, first := range c.First {
		topics = append(topics, topic)
		firsts = append(firsts, first)
		lasts = append(lasts, c.Last[topic])
	}
	sortTopics(topics, firsts, lasts)
	return t.tracer.Start(ctx, "flechtwerk.commit",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			MessagingSystem.String("kafka"),
			MessagingOperationType.String("settle"),
			MessagingOperationName.String("commit"),
			MessagingConsumerGroup.String(t.appID),
			MessagingBatchCount.Int(c.Records),
			ApplicationID.String(t.appID),
			TaskPartition.Int(int(c.Task)),
			CommitOutputs.Int(c.Outputs),
			CommitStateWrites.Int(c.StateWrites),
			CommitTopics.StringSlice(topics),
			CommitFirstOffsets.Int64Slice(firsts),
			CommitLastOffsets.Int64Slice(lasts),
			CommitLinksDropped.Int(c.Dropped),
		))
}

// sortTopics sorts topics, and firsts and lasts along.
func sortTopics(topics []string, firsts, lasts []int64) {
	for i := 1; i < len(topics); i++ {
		for j := i; j > 0 && topics[j] < topics[j-1]; j-- {
			topics[j], topics[j-1] = topics[j-1], topics[j]
			firsts[j], firsts[j-1] = firsts[j-1], firsts[j]
			lasts[j], lasts[j-1] = lasts[j-1], lasts[j]
		}
	}
}

// Headers is a propagation.TextMapCarrier over a record's headers. Get
// returns the first header of a key; Set replaces every header of the key
// with one.
type Headers struct{ H *[]kgo.RecordHeader }

// Get returns the value of the first header named key.
func (h Headers) Get(key string) string {
	for _, x := range *h.H {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}

// Set replaces the headers named key by one with value. It writes a new
// slice: the old one may be shared (an output's headers copied from its
// input's).
func (h Headers) Set(key, value string) {
	*h.H = replace(*h.H, []kgo.RecordHeader{{Key: key, Value: []byte(value)}})
}

// Keys returns the header names.
func (h Headers) Keys() []string {
	keys := make([]string, 0, len(*h.H))
	for _, x := range *h.H {
		keys = append(keys, x.Key)
	}
	return keys
}

// replace returns a new slice of hs without the headers named as one of
// add, followed by add: in place of their first, a key of add that hs
// held; at the end, the others.
func replace(hs, add []kgo.RecordHeader) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(hs)+len(add))
	var done uint64 // bit i: add[i] is in out (a propagator sets a few keys)
	for _, x := range hs {
		i := index(add, x.Key)
		switch {
		case i < 0:
			out = append(out, x)
		case i < 64 && done&(1<<i) == 0:
			out = append(out, add[i])
			done |= 1 << i
		}
	}
	for i, a := range add {
		if i >= 64 || done&(1<<i) == 0 {
			out = append(out, a)
		}
	}
	return out
}

func index(hs []kgo.RecordHeader, key string) int {
	for i, h := range hs {
		if h.Key == key {
			return i
		}
	}
	return -1
}

// collected is a propagation.TextMapCarrier that collects what a
// propagator injects.
type collected []kgo.RecordHeader

func (c *collected) Get(key string) string {
	if i := index(*c, key); i >= 0 {
		return string((*c)[i].Value)
	}
	return ""
}

func (c *collected) Set(key, value string) {
	if i := index(*c, key); i >= 0 {
		(*c)[i].Value = []byte(value)
		return
	}
	*c = append(*c, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c *collected) Keys() []string {
	keys := make([]string, len(*c))
	for i, h := range *c {
		keys[i] = h.Key
	}
	return keys
}
