package flechtwerk

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// Code is the stable identifier of a configuration (or runtime) error. Codes never change
// meaning between releases; match on them, not on messages.
type Code string

// All configuration error codes. Each has a sentinel ErrXxx below for use
// with errors.Is.
const (
	// CodeEmptyApplicationID: the application id is empty. It names the
	// consumer group, the transactional IDs and the changelog topic.
	CodeEmptyApplicationID Code = "EMPTY_APPLICATION_ID"
	// CodeNoBrokers: no seed brokers were given.
	CodeNoBrokers Code = "NO_BROKERS"
	// CodeNoInputTopics: a transformer was given no input topics.
	CodeNoInputTopics Code = "NO_INPUT_TOPICS"
	// CodeDuplicateTopic: a topic was listed twice, or an output or
	// changelog topic is also an input.
	CodeDuplicateTopic Code = "DUPLICATE_TOPIC"
	// CodeMissingTopic: an input or config topic, or an output topic a
	// transformer declared (transformer.Produces) without asking to create
	// it, does not exist.
	CodeMissingTopic Code = "MISSING_TOPIC"
	// CodePartitionMismatch: input topics (or the config topics of one
	// extractor) have unequal partition counts.
	CodePartitionMismatch Code = "PARTITION_COUNT_MISMATCH"
	// CodeChangelogMismatch: an existing changelog topic has a different
	// partition count from the inputs (repartitioning needs a migration),
	// or is not compacted.
	CodeChangelogMismatch Code = "CHANGELOG_MISMATCH"
	// CodeChangelogMissing: a stateful transformer's changelog topic does
	// not exist while its group has committed input offsets (above 0, not
	// marked as a state reset), so the state those offsets account for is
	// gone, also when the inputs' records below them were deleted. Restore
	// the topic, or reset offsets and state ("flechtwerk reset APP --state",
	// which marks the offsets with changelog.ResetMarker) to go on from
	// empty state. The same holds for the changelog of a named store or
	// of the timer store once a committed offset names the store in its
	// metadata (changelog.StoresMetadata); a store no offset names was
	// added to the application and starts empty.
	CodeChangelogMissing Code = "CHANGELOG_MISSING"
	// CodeTransactionTimeout: the transaction timeout does not exceed the
	// time a batch (or an extractor page) may take.
	CodeTransactionTimeout Code = "TRANSACTION_TIMEOUT_TOO_SHORT"
	// CodeInvalidOption: an option has a value outside its range.
	CodeInvalidOption Code = "INVALID_OPTION"
	// CodeInvalidTransformer: the stage is unusable (nil, not a stage a
	// runner runs, a nil function, a codec for the wrong state type).
	CodeInvalidTransformer Code = "INVALID_TRANSFORMER"
	// CodeWrongStageKind: a stage was given to the constructor of
	// another kind (an extractor to runner.NewTransformer).
	CodeWrongStageKind Code = "WRONG_STAGE_KIND"
	// CodeNoPollInterval: an extractor was given no poll interval.
	CodeNoPollInterval Code = "NO_POLL_INTERVAL"
	// CodeNoConfigTopics: an extractor or a config table was given no
	// config topics.
	CodeNoConfigTopics Code = "NO_CONFIG_TOPICS"
	// CodeInvalidRecordPolicy: the invalid-record policy contradicts
	// itself (two different policies given) or is incomplete (a
	// dead-letter policy without a topic, a substitute policy without a
	// hook).
	CodeInvalidRecordPolicy Code = "INVALID_RECORD_POLICY"
	// CodeNoDelivery: a sink declared no delivery mode
	// (sink.Delivery(sink.AtLeastOnce) or sink.AtMostOnce).
	CodeNoDelivery Code = "NO_DELIVERY_MODE"
	// CodeDeliveryConflict: delivery settings contradict each other, e.g.
	// a timer auto-commit for an at-least-once sink or a commit
	// keepalive for an at-most-once one.
	CodeDeliveryConflict Code = "DELIVERY_CONFLICT"
)

// Codes of runtime errors: errors that end Run after processing started.
// Their sentinels are plain errors matched with errors.Is; the error values
// are the packages' own types (e.g. *runner.BatchTimeoutError).
const (
	// CodeBatchTimeout: a batch did not finish within BatchTimeout.
	// Nothing of it was committed; its records are redelivered.
	CodeBatchTimeout Code = "BATCH_TIMEOUT"
	// CodeOffsetFetch: the group's committed offsets could not be fetched
	// when a sink started or was assigned partitions. Run fails rather
	// than fall back to the reset policy.
	CodeOffsetFetch Code = "OFFSET_FETCH_FAILED"
	// CodeTaskTimeout: a task kept failing with transient broker errors
	// (and was re-initialized after each) without one successful commit
	// for longer than TaskTimeout, or the group member could not rejoin
	// its group for that long. Nothing uncommitted is visible; its records
	// are redelivered.
	CodeTaskTimeout Code = "TASK_TIMEOUT"
	// CodeStageOpen: the Open method of a stage's Lifecycle failed (or
	// panicked) when Run started. Nothing was consumed, polled or
	// committed.
	CodeStageOpen Code = "STAGE_OPEN_FAILED"
	// CodeNotAuthorized: the broker refused a request for lack of an ACL;
	// the error names the operation and the resource the principal needs
	// it on. Nothing of the refused request became visible.
	CodeNotAuthorized Code = "NOT_AUTHORIZED"
	// CodeNoMQTTBroker: an MQTT bridge was given no broker address, or
	// one it cannot use.
	CodeNoMQTTBroker Code = "NO_MQTT_BROKER"
	// CodeNoMQTTClientID: an MQTT bridge was given no client id. The
	// client id names the persistent session: only the same id resumes
	// the messages a crashed instance left unacknowledged.
	CodeNoMQTTClientID Code = "NO_MQTT_CLIENT_ID"
	// CodeInvalidShareGroup: the application id cannot be the share group
	// of $share/{group}/{filter} (it is empty or holds '/', '+' or '#').
	CodeInvalidShareGroup Code = "INVALID_SHARE_GROUP"
	// CodeSchemaRefused: a schema registry refused the schema of a codec
	// (package schemaregistry) when the codec opened: incompatible with
	// the subject's registered versions under its compatibility rule,
	// invalid, not registered (for a codec that does not register), or
	// not authorized. The error names the subject. Nothing was encoded;
	// fix the schema or the subject's compatibility rule.
	CodeSchemaRefused Code = "SCHEMA_REFUSED"
	// CodeSchemaRegistryUnavailable: a codec could not reach its schema
	// registry when it opened (a connection error, a timeout or a server
	// error). The error names the subject. Nothing was encoded; it is
	// safe to retry.
	CodeSchemaRegistryUnavailable Code = "SCHEMA_REGISTRY_UNAVAILABLE"
	// CodeOutputPartition: an output record's explicit partition, or the
	// partition its topic's partitioner chose, is not a partition of its
	// topic (an *OutputError names both). The task's transaction was
	// aborted; its records are redelivered when it runs again.
	CodeOutputPartition Code = "OUTPUT_PARTITION_OUT_OF_RANGE"
	// CodeOutputEncode: the key or value of a typed output did not encode
	// (an *OutputError names the topic). The transform call failed: its
	// task's transaction is aborted.
	CodeOutputEncode Code = "OUTPUT_ENCODE_FAILED"
	// CodeTopicCreate: a topic the runtime creates (a repartition topic
	// of a runner.Pipeline) could not be created, or not every partition
	// of it had a leader in the metadata in time. The error names the
	// topic and keeps the broker's error in its chain. No stage started;
	// it is safe to retry.
	CodeTopicCreate Code = "TOPIC_CREATE_FAILED"
	// CodeRepartitionPolicy: an existing repartition topic of a
	// runner.Pipeline has a cleanup.policy other than delete (a compacted
	// one would drop all but the last record of each key). The error names
	// the topic. No stage started; delete the topic or set its
	// cleanup.policy to delete.
	CodeRepartitionPolicy Code = "REPARTITION_POLICY_MISMATCH"
	// CodeTransactionModeMismatch: the transformer's consumer group has
	// members that run the other transaction mode (runner.SharedProducer
	// on one side, a producer per task on the other); the group refused
	// this member before it was assigned anything. Every instance of an
	// application runs the same mode: to switch, stop every instance, then
	// start them in the new mode.
	CodeTransactionModeMismatch Code = "TRANSACTION_MODE_MISMATCH"
)

// Sentinels, one per code: errors.Is(err, ErrMissingTopic) is true for every
// *ConfigError with CodeMissingTopic.
var (
	ErrEmptyApplicationID  = &ConfigError{Code: CodeEmptyApplicationID}
	ErrNoBrokers           = &ConfigError{Code: CodeNoBrokers}
	ErrNoInputTopics       = &ConfigError{Code: CodeNoInputTopics}
	ErrDuplicateTopic      = &ConfigError{Code: CodeDuplicateTopic}
	ErrMissingTopic        = &ConfigError{Code: CodeMissingTopic}
	ErrPartitionMismatch   = &ConfigError{Code: CodePartitionMismatch}
	ErrChangelogMismatch   = &ConfigError{Code: CodeChangelogMismatch}
	ErrChangelogMissing    = &ConfigError{Code: CodeChangelogMissing}
	ErrTransactionTimeout  = &ConfigError{Code: CodeTransactionTimeout}
	ErrInvalidOption       = &ConfigError{Code: CodeInvalidOption}
	ErrInvalidTransformer  = &ConfigError{Code: CodeInvalidTransformer}
	ErrWrongStageKind      = &ConfigError{Code: CodeWrongStageKind}
	ErrNoPollInterval      = &ConfigError{Code: CodeNoPollInterval}
	ErrNoConfigTopics      = &ConfigError{Code: CodeNoConfigTopics}
	ErrInvalidRecordPolicy = &ConfigError{Code: CodeInvalidRecordPolicy}
	ErrNoDelivery          = &ConfigError{Code: CodeNoDelivery}
	ErrDeliveryConflict    = &ConfigError{Code: CodeDeliveryConflict}
	ErrNoMQTTBroker        = &ConfigError{Code: CodeNoMQTTBroker}
	ErrNoMQTTClientID      = &ConfigError{Code: CodeNoMQTTClientID}
	ErrInvalidShareGroup   = &ConfigError{Code: CodeInvalidShareGroup}

	ErrSchemaRefused             = &ConfigError{Code: CodeSchemaRefused}
	ErrSchemaRegistryUnavailable = &ConfigError{Code: CodeSchemaRegistryUnavailable}
	ErrTopicCreate               = &ConfigError{Code: CodeTopicCreate}
	ErrRepartitionPolicy         = &ConfigError{Code: CodeRepartitionPolicy}
	ErrTransactionModeMismatch   = &ConfigError{Code: CodeTransactionModeMismatch}

	// ErrBatchTimeout matches the error that ends Run when a batch did
	// not finish within BatchTimeout.
	ErrBatchTimeout = errors.New("flechtwerk: " + string(CodeBatchTimeout))
	// ErrOffsetFetch matches the error that ends Run when a sink could
	// not fetch the group's committed offsets.
	ErrOffsetFetch = errors.New("flechtwerk: " + string(CodeOffsetFetch))
	// ErrTaskTimeout matches the error that ends Run when a task kept
	// failing with transient errors for longer than TaskTimeout.
	ErrTaskTimeout = errors.New("flechtwerk: " + string(CodeTaskTimeout))
	// ErrStageOpen matches the error that ends Run when the Open method
	// of the stage's Lifecycle failed.
	ErrStageOpen = errors.New("flechtwerk: " + string(CodeStageOpen))
	// ErrNotAuthorized matches every error that names a missing ACL
	// (the broker's own error, a *kerr.Error, stays in the chain).
	ErrNotAuthorized = errors.New("flechtwerk: " + string(CodeNotAuthorized))
	// ErrOutputPartition matches an *OutputError of CodeOutputPartition.
	ErrOutputPartition = errors.New("flechtwerk: " + string(CodeOutputPartition))
	// ErrOutputEncode matches an *OutputError of CodeOutputEncode.
	ErrOutputEncode = errors.New("flechtwerk: " + string(CodeOutputEncode))
)

// ConfigError is a configuration problem found before anything was
// processed: no transaction was opened, no offset moved, nothing is lost.
// Fix the configuration (or the cluster) and start again.
type ConfigError struct {
	// Code is the stable identifier of the problem.
	Code Code
	// Field names the option, topic or object at fault, e.g.
	// "TransactionTimeout" or "topic orders".
	Field string
	// Msg says what is wrong.
	Msg string
}

// Errorf returns a *ConfigError with the given code and field.
func Errorf(code Code, field, format string, args ...any) *ConfigError {
	return &ConfigError{Code: code, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func (e *ConfigError) Error() string {
	switch {
	case e.Field == "" && e.Msg == "":
		return "flechtwerk: " + string(e.Code)
	case e.Field == "":
		return fmt.Sprintf("flechtwerk: %s: %s", e.Code, e.Msg)
	default:
		return fmt.Sprintf("flechtwerk: %s: %s: %s", e.Code, e.Field, e.Msg)
	}
}

// Is reports whether target is a *ConfigError with the same code.
func (e *ConfigError) Is(target error) bool {
	t, ok := target.(*ConfigError)
	return ok && t.Code == e.Code
}

// PanicError is a panic in user code (a transform, a state-key function, a
// codec, a poll function, a config decoder or enrich hook), recovered by the
// runtime. It is handled like an error the user code returned: it is the
// Err of the error that names the record or config (a
// *transformer.ProcessError, an *extractor.PollError, a
// *configtopic.RecordError), the open transaction is aborted, and Run ends.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the stack of the panicking goroutine.
	Stack []byte
}

// Recovered returns a *PanicError for a value recover returned, with the
// current goroutine's stack. Call it in the deferred function that
// recovered.
func Recovered(v any) *PanicError { return &PanicError{Value: v, Stack: debug.Stack()} }

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v\n%s", e.Value, e.Stack) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
