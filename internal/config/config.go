package config

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/store"
)

// Kind is the kind of stage a runner runs.
type Kind int

const (
	// Transformer runs a transformer over input topics.
	Transformer Kind = iota
	// Extractor polls sources for the configs of config topics.
	Extractor
	// Sink writes the records of input topics outside Kafka.
	Sink
	// Bridge relays messages of a push source (MQTT) into Kafka, for the
	// configs of config topics.
	Bridge
)

func (k Kind) String() string {
	switch k {
	case Extractor:
		return "an extractor"
	case Sink:
		return "a sink"
	case Bridge:
		return "a bridge"
	}
	return "a transformer"
}

// Options are the options of a runner, for every stage kind. Defaults
// returns them with their defaults; the runner's options then set fields
// (the option types of package runner keep each option to the kinds that
// read it), and Validate checks the values.
type Options struct {
	// Shared by several kinds.
	Brokers            []string
	ApplicationID      string
	StateDir           string
	TransactionTimeout time.Duration
	Concurrency        int
	Replication        int16
	SessionTimeout     time.Duration
	KafkaOpts          []kgo.Opt
	ConsumerOpts       []kgo.Opt
	Logger             *slog.Logger
	StoreRetention     time.Duration
	// Metrics, when given (Registerer), records the catalog; Advertise is
	// the address advertised for interactive queries.
	Registerer prometheus.Registerer
	Metrics    *metrics.Recorder
	Advertise  string

	// Transformer only.
	InputTopics    []string
	MaxPollRecords int
	BatchTimeout   time.Duration
	// TaskTimeout bounds how long a task may keep failing with transient
	// broker errors (and being re-initialized) before Run ends.
	TaskTimeout time.Duration
	// CommitInterval, CommitMaxRecords and CommitMaxBytes bound a task's
	// open transaction: its age, its input records, the bytes of its
	// outputs and state writes.
	CommitInterval   time.Duration
	CommitMaxRecords int
	CommitMaxBytes   int64
	// StandbyReplicas is how many standby replicas of each task the
	// group keeps (on instances that do not run it).
	StandbyReplicas int
	// MaxTimers bounds the due timers of keys without records one batch
	// of a task fires.
	MaxTimers int
	// SharedProducer runs the transformer in the shared-producer mode:
	// one transactional producer for the instance, one transaction per
	// commit interval spanning its tasks. TransactionTimeoutSet and
	// BatchTimeoutSet tell an explicit option from the default, which
	// that mode shortens (see Settle).
	SharedProducer        bool
	TransactionTimeoutSet bool
	BatchTimeoutSet       bool
	// TracerProvider turns tracing on (nil: off); Propagator reads and
	// writes trace context in headers (nil: W3C trace context).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator

	// Extractor only.
	ConfigTopics []string
	PollInterval time.Duration
	PageTimeout  time.Duration
	// KeepCursors keeps the cursors of tombstoned configs (else they are
	// deleted); BadCursorPolicy is the value of an unknown policy.
	KeepCursors     bool
	BadCursorPolicy *int

	// Invalid records (a transformer or a sink): every InvalidRecords option
	// given, in order; see invalid.go.
	InvalidRecords []InvalidRecords
	// Sink only (the sink's delivery mode is declared on the sink).
	// CommitKeepalive re-commits idle partitions (at-least-once);
	// AutoCommitInterval is the commit timer (at-most-once). The Set
	// flags tell an explicit option from the default.
	CommitKeepalive       time.Duration
	CommitKeepaliveSet    bool
	AutoCommitInterval    time.Duration
	AutoCommitIntervalSet bool

	// Retries of sink writes and extractor polls, and the quarantine
	// of failing configs (see retry.go).
	Retry RetryOptions
}

// Defaults returns the options of kind with their defaults.
func Defaults(kind Kind) Options {
	o := Options{
		StateDir:           filepath.Join(os.TempDir(), "flechtwerk"),
		TransactionTimeout: 60 * time.Second,
		Concurrency:        64,
		Replication:        -1,
		SessionTimeout:     10 * time.Second,
		StoreRetention:     24 * time.Hour,
		MaxPollRecords:     500,
		BatchTimeout:       30 * time.Second,
		TaskTimeout:        5 * time.Minute,
		CommitInterval:     100 * time.Millisecond,
		CommitMaxRecords:   100_000,
		CommitMaxBytes:     64 << 20,
		MaxTimers:          batch.DefaultMaxTimers,
		PageTimeout:        30 * time.Second,
		CommitKeepalive:    30 * time.Minute,
		AutoCommitInterval: 5 * time.Second,
	}
	if kind == Extractor {
		// A poll holds its slot for a whole source request, not for
		// one record's transform.
		o.Concurrency = 16
	}
	return o
}

// Shared-producer mode's defaults: a transaction of a frozen instance
// holds its partitions' last stable offset for at most
// SharedTransactionTimeout (Kafka Streams' exactly-once default), and a
// batch must fit well inside it.
const (
	SharedTransactionTimeout = 10 * time.Second
	SharedBatchTimeout       = 5 * time.Second
)

// Settle applies the defaults that depend on other options, once every
// option is set: the shared-producer mode's shorter timeouts, unless
// given.
func (o *Options) Settle() {
	if !o.SharedProducer {
		return
	}
	if !o.TransactionTimeoutSet {
		o.TransactionTimeout = SharedTransactionTimeout
	}
	if !o.BatchTimeoutSet {
		o.BatchTimeout = SharedBatchTimeout
	}
}

// Validate reports every static problem of the options for a stage of
// kind at once, each a *flechtwerk.ConfigError, joined with errors.Join.
// stateful says whether the stage keeps state (an extractor always does:
// its cursors).
func (o *Options) Validate(kind Kind, stateful bool) error {
	var errs []error
	bad := func(code flechtwerk.Code, field, format string, args ...any) {
		errs = append(errs, flechtwerk.Errorf(code, field, format, args...))
	}
	if o.ApplicationID == "" {
		bad(flechtwerk.CodeEmptyApplicationID, "ApplicationID", "application id is empty")
	}
	if len(o.Brokers) == 0 {
		bad(flechtwerk.CodeNoBrokers, "SeedBrokers", "no seed brokers")
	}
	if o.Concurrency <= 0 {
		bad(flechtwerk.CodeInvalidOption, "Concurrency", "must be positive, is %d", o.Concurrency)
	}
	if o.SessionTimeout <= 0 {
		bad(flechtwerk.CodeInvalidOption, "SessionTimeout", "must be positive, is %v", o.SessionTimeout)
	}
	if o.Replication == 0 || o.Replication < -1 {
		bad(flechtwerk.CodeInvalidOption, "ChangelogReplicationFactor", "must be -1 or positive, is %d", o.Replication)
	}
	switch kind {
	case Transformer:
		errs = append(errs, o.topics("InputTopics", "an input", o.InputTopics, flechtwerk.CodeNoInputTopics, "no input topics")...)
		if o.MaxPollRecords <= 0 {
			bad(flechtwerk.CodeInvalidOption, "MaxPollRecords", "must be positive, is %d", o.MaxPollRecords)
		}
		if o.BatchTimeout <= 0 {
			bad(flechtwerk.CodeInvalidOption, "BatchTimeout", "must be positive, is %v", o.BatchTimeout)
		}
		if o.TransactionTimeout <= o.BatchTimeout {
			bad(flechtwerk.CodeTransactionTimeout, "TransactionTimeout",
				"transaction timeout %v must exceed the batch timeout %v, or a slow batch's transaction is aborted under it", o.TransactionTimeout, o.BatchTimeout)
		}
		if o.TaskTimeout <= 0 {
			bad(flechtwerk.CodeInvalidOption, "TaskTimeout", "must be positive, is %v", o.TaskTimeout)
		}
		if o.CommitInterval <= 0 {
			bad(flechtwerk.CodeInvalidOption, "CommitInterval", "must be positive, is %v", o.CommitInterval)
		} else if o.CommitInterval >= o.TransactionTimeout {
			bad(flechtwerk.CodeTransactionTimeout, "TransactionTimeout",
				"transaction timeout %v must exceed the commit interval %v, or every open transaction is aborted under it", o.TransactionTimeout, o.CommitInterval)
		}
		if o.CommitMaxRecords <= 0 {
			bad(flechtwerk.CodeInvalidOption, "CommitMaxRecords", "must be positive, is %d", o.CommitMaxRecords)
		}
		if o.CommitMaxBytes <= 0 {
			bad(flechtwerk.CodeInvalidOption, "CommitMaxBytes", "must be positive, is %d", o.CommitMaxBytes)
		}
		if o.MaxTimers <= 0 {
			bad(flechtwerk.CodeInvalidOption, "MaxTimersPerBatch", "must be positive, is %d", o.MaxTimers)
		}
		if stateful && o.StateDir == "" {
			bad(flechtwerk.CodeInvalidOption, "StateDir", "a stateful transformer needs a state directory")
		}
		switch {
		case o.StandbyReplicas < 0:
			bad(flechtwerk.CodeInvalidOption, "StandbyReplicas", "must be 0 or positive, is %d", o.StandbyReplicas)
		case o.StandbyReplicas > 0 && !stateful:
			bad(flechtwerk.CodeInvalidOption, "StandbyReplicas", "%d standby replicas of a stateless transformer: it has no state to keep warm", o.StandbyReplicas)
		case o.StandbyReplicas > 0 && o.StateDir == "":
			bad(flechtwerk.CodeInvalidOption, "StandbyReplicas", "standby replicas keep their stores in the state directory, and StateDir is empty")
		}
		errs = append(errs, o.validateInvalidRecords()...)
	case Extractor:
		errs = append(errs, o.topics("ConfigTopics", "a config", o.ConfigTopics, flechtwerk.CodeNoConfigTopics, "no config topics")...)
		if o.PollInterval <= 0 {
			bad(flechtwerk.CodeNoPollInterval, "PollInterval", "poll interval must be positive, is %v", o.PollInterval)
		}
		if o.PageTimeout <= 0 {
			bad(flechtwerk.CodeInvalidOption, "PageTimeout", "must be positive, is %v", o.PageTimeout)
		}
		if o.TransactionTimeout <= o.PageTimeout {
			bad(flechtwerk.CodeTransactionTimeout, "TransactionTimeout",
				"transaction timeout %v must exceed the page timeout %v, or a slow page's transaction is aborted under it", o.TransactionTimeout, o.PageTimeout)
		}
		if o.BadCursorPolicy != nil {
			bad(flechtwerk.CodeInvalidOption, "TombstonedCursors", "unknown cursor policy %d", *o.BadCursorPolicy)
		}
		if o.StateDir == "" {
			bad(flechtwerk.CodeInvalidOption, "StateDir", "an extractor needs a state directory for its cursors")
		}
	}
	if kind == Sink {
		errs = append(errs, o.validateSink()...)
	}
	if kind == Bridge {
		errs = append(errs, o.topics("ConfigTopics", "a config", o.ConfigTopics, flechtwerk.CodeNoConfigTopics, "no config topics")...)
		if o.TransactionTimeout <= 0 {
			bad(flechtwerk.CodeInvalidOption, "TransactionTimeout", "must be positive, is %v", o.TransactionTimeout)
		}
	}
	errs = append(errs, o.Retry.validate()...)
	return errors.Join(errs...)
}

// validateSink checks the options of a sink but its delivery settings
// (see Delivery).
func (o *Options) validateSink() []error {
	var errs []error
	errs = append(errs, o.topics("InputTopics", "an input", o.InputTopics, flechtwerk.CodeNoInputTopics, "no input topics")...)
	if o.MaxPollRecords <= 0 {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "MaxPollRecords", "must be positive, is %d", o.MaxPollRecords))
	}
	if o.CommitKeepalive <= 0 {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "CommitKeepalive", "must be positive, is %v", o.CommitKeepalive))
	}
	if o.AutoCommitInterval <= 0 {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "AutoCommitInterval", "must be positive, is %v", o.AutoCommitInterval))
	}
	errs = append(errs, o.validateInvalidRecords()...)
	return errs
}

// ValidateDelivery reports delivery settings that contradict the mode a
// sink declared (atLeastOnce: true for at-least-once, false for
// at-most-once), as *flechtwerk.ConfigError values with
// CodeDeliveryConflict.
func (o *Options) ValidateDelivery(atLeastOnce bool) error {
	var errs []error
	if atLeastOnce && o.AutoCommitIntervalSet {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeDeliveryConflict, "AutoCommitInterval",
			"the sink is at-least-once, which commits an offset only after its records are written; a timer auto-commit (at-most-once) contradicts it"))
	}
	if !atLeastOnce && o.CommitKeepaliveSet {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeDeliveryConflict, "CommitKeepalive",
			"the sink is at-most-once, whose timer auto-commit keeps offsets alive; CommitKeepalive is for at-least-once sinks"))
	}
	if !atLeastOnce && o.Retry.Sink != nil {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeDeliveryConflict, "SinkRetry",
			"the sink is at-most-once: a write retried after an error of unknown outcome (a timeout) may store its records twice, which that mode rules out; SinkRetry is for at-least-once sinks"))
	}
	return errors.Join(errs...)
}

// topics checks the input or config topics of option field.
func (o *Options) topics(field, role string, ts []string, none flechtwerk.Code, noneMsg string) []error {
	var errs []error
	if len(ts) == 0 {
		errs = append(errs, flechtwerk.Errorf(none, field, "%s", noneMsg))
	}
	seen := map[string]bool{}
	for _, t := range ts {
		if t == "" {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, field, "empty topic name"))
		}
		if seen[t] {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeDuplicateTopic, field, "topic %q listed twice", t))
		}
		seen[t] = true
	}
	if o.ApplicationID != "" && seen[o.Changelog()] {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeDuplicateTopic, field, "the changelog topic %q cannot be %s topic", o.Changelog(), role))
	}
	return errs
}

// EnsureLogger sets a discarding logger when none was given.
func (o *Options) EnsureLogger() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// ClientOpts returns the options of every client a runner creates: the
// seed brokers, the logger, then the user's Kafka options. It returns a
// new slice on every call.
func (o *Options) ClientOpts() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...), kgo.WithLogger(kslog.New(o.Logger))}, o.KafkaOpts...)
}

// The names derived from the application id, in one place.

// Group returns the consumer group: the application id.
func (o *Options) Group() string { return o.ApplicationID }

// Changelog returns the changelog topic: {application id}-changelog.
func (o *Options) Changelog() string { return changelog.Topic(o.ApplicationID) }

// TransactionalID returns the transactional ID of task (or token) n:
// {application id}-{n}.
func (o *Options) TransactionalID(n int32) string { return TransactionalID(o.ApplicationID, n) }

// AppDir returns the directory of the application's stores:
// {state dir}/{application id}.
func (o *Options) AppDir() string { return filepath.Join(o.StateDir, o.ApplicationID) }

// StoreDir returns the store directory of task (or token) n:
// {state dir}/{application id}/{n}.
func (o *Options) StoreDir(n int32) string { return StoreDir(o.StateDir, o.ApplicationID, n) }

// TransactionalID returns the transactional ID of task (or token) n of
// application app: {app}-{n}.
func TransactionalID(app string, n int32) string { return fencing.TransactionalID(app, n) }

// StoreDir returns the store directory of task (or token) n of application
// app under stateDir: {stateDir}/{app}/{n}.
func StoreDir(stateDir, app string, n int32) string { return store.Dir(stateDir, app, n) }
