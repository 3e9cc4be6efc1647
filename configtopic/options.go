package configtopic

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Opt configures a Table.
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	brokers   []string
	topics    []string
	decoder   any
	enrich    any
	kafkaOpts []kgo.Opt
	logger    *slog.Logger

	// partitionCheck is how often Run looks for partitions added to the
	// config topics.
	partitionCheck time.Duration
}

// SeedBrokers sets the brokers to bootstrap from (Kafka's
// bootstrap.servers). Required.
func SeedBrokers(brokers ...string) Opt { return opt(func(c *cfg) { c.brokers = brokers }) }

// Topics sets the config topics to read. Required; they must exist. They
// should be compacted (cleanup.policy=compact), or old configs age out of
// the log and vanish from new instances.
func Topics(topics ...string) Opt { return opt(func(c *cfg) { c.topics = topics }) }

// Codec sets the decoder of the record values. Default JSON[C](). Its type
// must match the Table's config type; a mismatch is a *flechtwerk.ConfigError
// with CodeInvalidOption.
func Codec[C any](d Decoder[C]) Opt { return opt(func(c *cfg) { c.decoder = d }) }

// Enrich sets a hook applied once to every decoded value that enters the
// Table (see EnrichFunc). Default: none.
// Its type must match the Table's config type.
func Enrich[C any](fn EnrichFunc[C]) Opt { return opt(func(c *cfg) { c.enrich = fn }) }

// WithKafkaOpts adds franz-go options to the Table's clients: TLS, SASL,
// dialers, client id. The isolation level and offsets are set by the Table.
func WithKafkaOpts(opts ...kgo.Opt) Opt {
	return opt(func(c *cfg) { c.kafkaOpts = append(c.kafkaOpts, opts...) })
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Opt { return opt(func(c *cfg) { c.logger = l }) }
