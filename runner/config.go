package runner

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
)

// Opt configures a Runner.
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	brokers       []string
	appID         string
	inputs        []string
	stateDir      string
	maxPoll       int
	txnTimeout    time.Duration
	batchTimeout  time.Duration
	concurrency   int
	replication   int16
	kafkaOpts     []kgo.Opt
	consumerOpts  []kgo.Opt
	logger        *slog.Logger
	sessionTimout time.Duration
	retention     time.Duration
}

func defaults() cfg {
	return cfg{
		stateDir:      filepath.Join(os.TempDir(), "flechtwerk"),
		maxPoll:       500,
		txnTimeout:    60 * time.Second,
		batchTimeout:  30 * time.Second,
		concurrency:   64,
		replication:   -1,
		sessionTimout: 10 * time.Second,
		retention:     24 * time.Hour,
	}
}

// SeedBrokers sets the brokers to bootstrap from (Kafka's
// bootstrap.servers). Required.
func SeedBrokers(brokers ...string) Opt { return opt(func(c *cfg) { c.brokers = brokers }) }

// ApplicationID names the application: the consumer group, the prefix of
// the transactional IDs ({id}-{partition}), the changelog topic
// ({id}-changelog) and the state directory. Required; changing it starts
// from scratch.
func ApplicationID(id string) Opt { return opt(func(c *cfg) { c.appID = id }) }

// InputTopics sets the topics to consume. Required. They must exist and have
// equal partition counts. Records of one state key run in this topic order,
// then offset order.
func InputTopics(topics ...string) Opt { return opt(func(c *cfg) { c.inputs = topics }) }

// StateDir sets the root directory of the task stores; task N of the
// application lives in {dir}/{application id}/{N}. Default
// $TMPDIR/flechtwerk. Stateless transformers create nothing there.
func StateDir(dir string) Opt { return opt(func(c *cfg) { c.stateDir = dir }) }

// StoreRetention sets how long the store of a task this instance no longer
// runs is kept in the state directory: a kept store is what a warm restart
// of the task would start from. Stores of the application
// ({dir}/{application id}/{N}) unused for longer are deleted at the start
// of Run and then periodically (every retention/4, at least every minute
// and at most every hour); a store that is open, in this process or
// another, is never deleted. 0 deletes every store as soon as nobody holds
// it; negative keeps stores forever. Default 24h, Kafka's default
// delete.retention.ms: an older store cannot be trusted against its
// changelog anyway, since tombstones written after it may have been cleaned
// away.
func StoreRetention(d time.Duration) Opt { return opt(func(c *cfg) { c.retention = d }) }

// MaxPollRecords caps the records of one batch (Kafka's max.poll.records).
// Default 500.
func MaxPollRecords(n int) Opt { return opt(func(c *cfg) { c.maxPoll = n }) }

// TransactionTimeout sets the producers' transaction timeout
// (transaction.timeout.ms): how long the broker lets a transaction of a
// silent owner stay open before aborting it. It must exceed BatchTimeout and
// not exceed the broker's transaction.max.timeout.ms (15 minutes by
// default). Default 60s.
func TransactionTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.txnTimeout = d }) }

// BatchTimeout bounds the time one batch may take, transform through
// commit; a batch that takes longer fails Run with a *BatchTimeoutError
// (flechtwerk.ErrBatchTimeout) naming its tasks, and nothing of it is
// committed. Run does not wait for a transform that ignores its ctx: that
// goroutine is abandoned, its results are discarded, and it may run on
// until the process exits. Default 30s. Rebalances wait for the in-flight
// batch, so keep it below the group's rebalance timeout (60s by default).
func BatchTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.batchTimeout = d }) }

// Concurrency bounds how many state-key buckets run their transforms at the
// same time, across all tasks. Default 64.
func Concurrency(n int) Opt { return opt(func(c *cfg) { c.concurrency = n }) }

// ChangelogReplicationFactor sets the replication factor of a changelog
// topic the runner creates. Default -1: the broker's
// default.replication.factor.
func ChangelogReplicationFactor(n int16) Opt { return opt(func(c *cfg) { c.replication = n }) }

// SessionTimeout sets the group session timeout (session.timeout.ms): how
// long the group waits for a silent member before moving its tasks.
// Default 10s.
func SessionTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.sessionTimout = d }) }

// WithKafkaOpts adds franz-go options to every client the runner creates:
// TLS, SASL, dialers, client id. Options that change delivery (isolation
// level, transactional id, partitioner, auto commit) are set by the runner
// and must not be passed.
func WithKafkaOpts(opts ...kgo.Opt) Opt {
	return opt(func(c *cfg) { c.kafkaOpts = append(c.kafkaOpts, opts...) })
}

// WithConsumerOpts adds franz-go options to the group consumer only, e.g.
// kgo.RebalanceTimeout or kgo.FetchMaxBytes.
func WithConsumerOpts(opts ...kgo.Opt) Opt {
	return opt(func(c *cfg) { c.consumerOpts = append(c.consumerOpts, opts...) })
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Opt { return opt(func(c *cfg) { c.logger = l }) }

// validate reports every static problem at once.
func (c *cfg) validate(stateful bool) error {
	var errs []error
	bad := func(code flechtwerk.Code, field, format string, args ...any) {
		errs = append(errs, flechtwerk.Errorf(code, field, format, args...))
	}
	if c.appID == "" {
		bad(flechtwerk.CodeEmptyApplicationID, "ApplicationID", "application id is empty")
	}
	if len(c.brokers) == 0 {
		bad(flechtwerk.CodeNoBrokers, "SeedBrokers", "no seed brokers")
	}
	if len(c.inputs) == 0 {
		bad(flechtwerk.CodeNoInputTopics, "InputTopics", "no input topics")
	}
	seen := map[string]bool{}
	for _, t := range c.inputs {
		if t == "" {
			bad(flechtwerk.CodeInvalidOption, "InputTopics", "empty topic name")
		}
		if seen[t] {
			bad(flechtwerk.CodeDuplicateTopic, "InputTopics", "topic %q listed twice", t)
		}
		seen[t] = true
	}
	if c.appID != "" && seen[c.appID+"-changelog"] {
		bad(flechtwerk.CodeDuplicateTopic, "InputTopics", "the changelog topic %q cannot be an input", c.appID+"-changelog")
	}
	if c.maxPoll <= 0 {
		bad(flechtwerk.CodeInvalidOption, "MaxPollRecords", "must be positive, is %d", c.maxPoll)
	}
	if c.concurrency <= 0 {
		bad(flechtwerk.CodeInvalidOption, "Concurrency", "must be positive, is %d", c.concurrency)
	}
	if c.batchTimeout <= 0 {
		bad(flechtwerk.CodeInvalidOption, "BatchTimeout", "must be positive, is %v", c.batchTimeout)
	}
	if c.sessionTimout <= 0 {
		bad(flechtwerk.CodeInvalidOption, "SessionTimeout", "must be positive, is %v", c.sessionTimout)
	}
	if c.txnTimeout <= c.batchTimeout {
		bad(flechtwerk.CodeTransactionTimeout, "TransactionTimeout",
			"transaction timeout %v must exceed the batch timeout %v, or a slow batch's transaction is aborted under it", c.txnTimeout, c.batchTimeout)
	}
	if c.replication == 0 || c.replication < -1 {
		bad(flechtwerk.CodeInvalidOption, "ChangelogReplicationFactor", "must be -1 or positive, is %d", c.replication)
	}
	if stateful && c.stateDir == "" {
		bad(flechtwerk.CodeInvalidOption, "StateDir", "a stateful transformer needs a state directory")
	}
	return errors.Join(errs...)
}
