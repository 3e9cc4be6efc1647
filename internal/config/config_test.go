package config

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/internal/retry"
)

// problems returns the code and field of every problem err reports.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var ce *flechtwerk.ConfigError
		require.True(t, errors.As(err, &ce), "not a *flechtwerk.ConfigError: %v", err)
		out = append(out, string(ce.Code)+" "+ce.Field)
	}
	if err != nil {
		walk(err)
	}
	return out
}

// valid returns the defaults of kind with the required options set.
func valid(kind Kind) Options {
	o := Defaults(kind)
	o.Brokers, o.ApplicationID = []string{"b:1"}, "app"
	switch kind {
	case Transformer, Sink:
		o.InputTopics = []string{"in"}
	case Extractor:
		o.ConfigTopics, o.PollInterval = []string{"cfg"}, time.Second
	case Bridge:
		o.ConfigTopics = []string{"cfg"}
	}
	return o
}

// TestValidate: the defaults plus the required options are valid for every
// kind, and each problem only run time can see — a value out of range, a
// missing required option, options that contradict each other — is one
// coded error naming its option, all reported at once.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     Kind
		stateful bool
		set      func(*Options)
		want     []string
	}{
		{"transformer defaults", Transformer, true, func(*Options) {}, nil},
		{"extractor defaults", Extractor, true, func(*Options) {}, nil},
		{"sink defaults", Sink, false, func(*Options) {}, nil},
		{"bridge defaults", Bridge, false, func(*Options) {}, nil},
		{"required", Transformer, true, func(o *Options) { o.Brokers, o.ApplicationID, o.InputTopics = nil, "", nil },
			[]string{"EMPTY_APPLICATION_ID ApplicationID", "NO_BROKERS SeedBrokers", "NO_INPUT_TOPICS InputTopics"}},
		{"shared values", Sink, false, func(o *Options) { o.Concurrency, o.SessionTimeout, o.Replication = 0, 0, 0 },
			[]string{"INVALID_OPTION Concurrency", "INVALID_OPTION SessionTimeout", "INVALID_OPTION ChangelogReplicationFactor"}},
		{"topics", Transformer, true, func(o *Options) { o.InputTopics = []string{"in", "in", "", "app-changelog"} },
			[]string{"DUPLICATE_TOPIC InputTopics", "INVALID_OPTION InputTopics", "DUPLICATE_TOPIC InputTopics"}},
		{"transaction timeout under the batch timeout", Transformer, true, func(o *Options) { o.TransactionTimeout = o.BatchTimeout },
			[]string{"TRANSACTION_TIMEOUT_TOO_SHORT TransactionTimeout"}},
		{"commit interval over the transaction timeout", Transformer, true, func(o *Options) {
			o.CommitInterval, o.TransactionTimeout, o.BatchTimeout = time.Minute, time.Minute, time.Second
		}, []string{"TRANSACTION_TIMEOUT_TOO_SHORT TransactionTimeout"}},
		{"transformer values", Transformer, true, func(o *Options) {
			o.MaxPollRecords, o.BatchTimeout, o.TaskTimeout, o.CommitInterval, o.CommitMaxRecords, o.CommitMaxBytes = 0, 0, 0, 0, 0, 0
			o.MaxTimers = -1
		}, []string{"INVALID_OPTION MaxPollRecords", "INVALID_OPTION BatchTimeout", "INVALID_OPTION TaskTimeout",
			"INVALID_OPTION CommitInterval", "INVALID_OPTION CommitMaxRecords", "INVALID_OPTION CommitMaxBytes",
			"INVALID_OPTION MaxTimersPerBatch"}},
		{"standbys of a stateless transformer", Transformer, false, func(o *Options) { o.StandbyReplicas = 1 },
			[]string{"INVALID_OPTION StandbyReplicas"}},
		{"standbys without a state directory", Transformer, true, func(o *Options) { o.StandbyReplicas, o.StateDir = 1, "" },
			[]string{"INVALID_OPTION StateDir", "INVALID_OPTION StandbyReplicas"}},
		{"extractor", Extractor, true, func(o *Options) {
			o.ConfigTopics, o.PollInterval, o.PageTimeout, o.StateDir = nil, 0, time.Hour, ""
			bad := 7
			o.BadCursorPolicy = &bad
		}, []string{"NO_CONFIG_TOPICS ConfigTopics", "NO_POLL_INTERVAL PollInterval", "TRANSACTION_TIMEOUT_TOO_SHORT TransactionTimeout",
			"INVALID_OPTION TombstonedCursors", "INVALID_OPTION StateDir"}},
		{"sink", Sink, false, func(o *Options) { o.InputTopics, o.CommitKeepalive, o.AutoCommitInterval = nil, 0, -1 },
			[]string{"NO_INPUT_TOPICS InputTopics", "INVALID_OPTION CommitKeepalive", "INVALID_OPTION AutoCommitInterval"}},
		{"bridge", Bridge, false, func(o *Options) { o.ConfigTopics, o.TransactionTimeout = nil, 0 },
			[]string{"NO_CONFIG_TOPICS ConfigTopics", "INVALID_OPTION TransactionTimeout"}},
		{"invalid-record policies", Sink, false, func(o *Options) {
			o.InvalidRecords = []InvalidRecords{{Mode: batch.DeadLetter}, {Mode: batch.Skip}}
		}, []string{"INVALID_RECORD_POLICY InvalidRecords", "INVALID_RECORD_POLICY InvalidRecords"}},
		{"dead letter to an input", Transformer, true, func(o *Options) {
			o.InvalidRecords = []InvalidRecords{{Mode: batch.DeadLetter, Topic: "in"}}
		}, []string{"DUPLICATE_TOPIC InvalidRecords"}},
		{"retry policies", Extractor, true, func(o *Options) {
			o.Retry = RetryOptions{Poll: &retry.Policy{Transient: func(error) bool { return true }}, QuarantineFor: -1}
		}, []string{"INVALID_OPTION PollRetry", "INVALID_OPTION QuarantineFailingConfigs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid(tc.kind)
			tc.set(&o)
			require.Equal(t, tc.want, problems(t, o.Validate(tc.kind, tc.stateful)))
		})
	}
}

// TestValidateDelivery: the options of one delivery mode given to a sink
// of the other are CodeDeliveryConflict errors, and the defaults suit
// both modes.
func TestValidateDelivery(t *testing.T) {
	o := valid(Sink)
	require.NoError(t, o.ValidateDelivery(true))
	require.NoError(t, o.ValidateDelivery(false))

	o.AutoCommitIntervalSet, o.CommitKeepaliveSet = true, true
	o.Retry.Sink = &retry.Policy{}
	require.Equal(t, []string{"DELIVERY_CONFLICT AutoCommitInterval"}, problems(t, o.ValidateDelivery(true)))
	require.Equal(t, []string{"DELIVERY_CONFLICT CommitKeepalive", "DELIVERY_CONFLICT SinkRetry"}, problems(t, o.ValidateDelivery(false)))
}

// TestDefaults: an extractor's concurrency bounds polls, not transforms.
func TestDefaults(t *testing.T) {
	require.Equal(t, 64, Defaults(Transformer).Concurrency)
	require.Equal(t, 16, Defaults(Extractor).Concurrency)
	require.Equal(t, 64, Defaults(Sink).Concurrency)
}
