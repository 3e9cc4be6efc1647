package extractor

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
)

// RunnerOpt configures a Runner.
type RunnerOpt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	brokers      []string
	appID        string
	topics       []string
	interval     time.Duration
	stateDir     string
	txnTimeout   time.Duration
	pageTimeout  time.Duration
	concurrency  int
	replication  int16
	session      time.Duration
	kafkaOpts    []kgo.Opt
	consumerOpts []kgo.Opt
	logger       *slog.Logger
	tombstoned   CursorPolicy
}

func defaults() cfg {
	return cfg{
		stateDir:    filepath.Join(os.TempDir(), "flechtwerk"),
		txnTimeout:  60 * time.Second,
		pageTimeout: 30 * time.Second,
		concurrency: 16,
		replication: -1,
		session:     10 * time.Second,
	}
}

// SeedBrokers sets the brokers to bootstrap from (Kafka's
// bootstrap.servers). Required.
func SeedBrokers(brokers ...string) RunnerOpt { return opt(func(c *cfg) { c.brokers = brokers }) }

// ApplicationID names the extractor: the consumer group that hands out the
// ownership tokens, the prefix of the transactional IDs ({id}-{token}), the
// cursor changelog topic ({id}-changelog) and the state directory.
// Required; changing it starts every config from an empty cursor.
func ApplicationID(id string) RunnerOpt { return opt(func(c *cfg) { c.appID = id }) }

// ConfigTopics sets the config topics: compacted topics whose live records
// are the poll targets. Required. They must exist and have equal partition
// counts; that count is the number of ownership tokens and of changelog
// partitions.
func ConfigTopics(topics ...string) RunnerOpt { return opt(func(c *cfg) { c.topics = topics }) }

// PollInterval sets how often each live config is polled: a poll starts at
// most once per interval per config, and never while the previous poll of
// the config runs. Required.
func PollInterval(d time.Duration) RunnerOpt { return opt(func(c *cfg) { c.interval = d }) }

// StateDir sets the root directory of the cursor stores; token N of the
// application lives in {dir}/{application id}/{N}. Default
// $TMPDIR/flechtwerk. Two Runners of one application must not share it.
func StateDir(dir string) RunnerOpt { return opt(func(c *cfg) { c.stateDir = dir }) }

// TransactionTimeout sets the producers' transaction timeout
// (transaction.timeout.ms). It must exceed PageTimeout and not exceed the
// broker's transaction.max.timeout.ms (15 minutes by default). Default 60s.
func TransactionTimeout(d time.Duration) RunnerOpt { return opt(func(c *cfg) { c.txnTimeout = d }) }

// PageTimeout bounds one page: the time from the start of a poll, or from
// its previous Commit, to the Commit that closes the page (or to the return
// of the poll function for the trailing page). A page that takes longer is
// aborted, its poll's context is canceled, and Run fails with an error
// naming the config key (errors.Is ErrPageTimeout). It must be below
// TransactionTimeout. Default 30s.
func PageTimeout(d time.Duration) RunnerOpt { return opt(func(c *cfg) { c.pageTimeout = d }) }

// Concurrency bounds how many polls run at the same time, across all
// configs and tokens. Default 16.
func Concurrency(n int) RunnerOpt { return opt(func(c *cfg) { c.concurrency = n }) }

// ChangelogReplicationFactor sets the replication factor of a changelog
// topic the runner creates. Default -1: the broker's
// default.replication.factor.
func ChangelogReplicationFactor(n int16) RunnerOpt { return opt(func(c *cfg) { c.replication = n }) }

// SessionTimeout sets the group session timeout (session.timeout.ms): how
// long the group waits for a silent instance before moving its tokens. The
// heartbeat interval is a third of it, at most 3s. Default 10s.
func SessionTimeout(d time.Duration) RunnerOpt { return opt(func(c *cfg) { c.session = d }) }

// WithKafkaOpts adds franz-go options to every client the runner creates:
// TLS, SASL, dialers, client id. Options that change delivery (isolation
// level, transactional id, partitioner) are set by the runner and must not
// be passed.
func WithKafkaOpts(opts ...kgo.Opt) RunnerOpt {
	return opt(func(c *cfg) { c.kafkaOpts = append(c.kafkaOpts, opts...) })
}

// CursorPolicy is what becomes of the cursor of a config whose record was
// tombstoned; see TombstonedCursors.
type CursorPolicy int

const (
	// DeleteCursors deletes the cursor of a tombstoned config: the owner
	// of its token writes a changelog tombstone in a transaction of the
	// token, like a page's cursor, and drops it from the store. A config
	// added again under the key starts from an empty cursor. The default.
	DeleteCursors CursorPolicy = iota
	// KeepCursors keeps the cursor of a tombstoned config in the
	// changelog and the store forever, so a config added again under the
	// key resumes where it stopped.
	KeepCursors
)

// TombstonedCursors sets what becomes of the cursor of a config whose record
// is tombstoned. Default DeleteCursors: a tombstone says the config is gone,
// and keeping its cursor would grow the changelog and every store with each
// config ever deleted, and make a new config that reuses the key (a new
// tenant with an old id) silently skip what the old one read. To stop a
// config for a while without losing its cursor, suspend it instead (see
// Suspended); use KeepCursors when configs are deleted and added again on
// purpose.
//
// Under DeleteCursors the cursor is deleted once the owner of the config's
// token sees the tombstone (after a running poll of the config ends), or,
// when the tombstone was written while no instance held the token, when an
// instance takes the token. A config added again before its owner saw the
// tombstone keeps its cursor.
func TombstonedCursors(p CursorPolicy) RunnerOpt { return opt(func(c *cfg) { c.tombstoned = p }) }

// WithConsumerOpts adds franz-go options to the group member only, e.g.
// kgo.RebalanceTimeout. The runner's delivery settings — the group, its
// topics, range assignment, no auto-commit, the session and heartbeat, and
// the partition callbacks — are applied after them and cannot be replaced;
// an option that contradicts them (kgo.AutoCommitMarks) makes Run fail.
func WithConsumerOpts(opts ...kgo.Opt) RunnerOpt {
	return opt(func(c *cfg) { c.consumerOpts = append(c.consumerOpts, opts...) })
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) RunnerOpt { return opt(func(c *cfg) { c.logger = l }) }

// validate reports every static problem at once.
func (c *cfg) validate() error {
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
	if len(c.topics) == 0 {
		bad(flechtwerk.CodeNoConfigTopics, "ConfigTopics", "no config topics")
	}
	seen := map[string]bool{}
	for _, t := range c.topics {
		if t == "" {
			bad(flechtwerk.CodeInvalidOption, "ConfigTopics", "empty topic name")
		}
		if seen[t] {
			bad(flechtwerk.CodeDuplicateTopic, "ConfigTopics", "topic %q listed twice", t)
		}
		seen[t] = true
	}
	if c.appID != "" && seen[changelog.Topic(c.appID)] {
		bad(flechtwerk.CodeDuplicateTopic, "ConfigTopics", "the changelog topic %q cannot be a config topic", changelog.Topic(c.appID))
	}
	if c.interval <= 0 {
		bad(flechtwerk.CodeNoPollInterval, "PollInterval", "poll interval must be positive, is %v", c.interval)
	}
	if c.pageTimeout <= 0 {
		bad(flechtwerk.CodeInvalidOption, "PageTimeout", "must be positive, is %v", c.pageTimeout)
	}
	if c.txnTimeout <= c.pageTimeout {
		bad(flechtwerk.CodeTransactionTimeout, "TransactionTimeout",
			"transaction timeout %v must exceed the page timeout %v, or a slow page's transaction is aborted under it", c.txnTimeout, c.pageTimeout)
	}
	if c.concurrency <= 0 {
		bad(flechtwerk.CodeInvalidOption, "Concurrency", "must be positive, is %d", c.concurrency)
	}
	if c.replication == 0 || c.replication < -1 {
		bad(flechtwerk.CodeInvalidOption, "ChangelogReplicationFactor", "must be -1 or positive, is %d", c.replication)
	}
	if c.session <= 0 {
		bad(flechtwerk.CodeInvalidOption, "SessionTimeout", "must be positive, is %v", c.session)
	}
	if c.tombstoned != DeleteCursors && c.tombstoned != KeepCursors {
		bad(flechtwerk.CodeInvalidOption, "TombstonedCursors", "unknown cursor policy %d", c.tombstoned)
	}
	if c.stateDir == "" {
		bad(flechtwerk.CodeInvalidOption, "StateDir", "an extractor needs a state directory for its cursors")
	}
	return errors.Join(errs...)
}
