package metrics

// Type is the Prometheus type of a metric.
type Type string

// The metric types of the catalog.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Metric describes one metric of the catalog. Every metric also carries
// the constant label application_id.
type Metric struct {
	Name   string
	Type   Type
	Unit   string // "records", "bytes", "seconds", "transactions", "ratio", ...
	Labels []string
	Help   string
}

// Names of the metrics. They are stable: a rename is a breaking change.
const (
	RunnerState            = "flechtwerk_runner_state"
	RecordsIn              = "flechtwerk_records_in_total"
	RecordsOut             = "flechtwerk_records_out_total"
	InputBytes             = "flechtwerk_input_bytes_total"
	OutputBytes            = "flechtwerk_output_bytes_total"
	StateWrites            = "flechtwerk_state_writes_total"
	StateValueBytes        = "flechtwerk_state_value_bytes"
	InvalidRecords         = "flechtwerk_invalid_records_total"
	DeadLetters            = "flechtwerk_dead_letters_total"
	BatchRecords           = "flechtwerk_batch_records"
	BatchDuration          = "flechtwerk_batch_duration_seconds"
	BatchTransformDuration = "flechtwerk_batch_transform_duration_seconds"
	TxnCommitted           = "flechtwerk_transactions_committed_total"
	TxnAborted             = "flechtwerk_transactions_aborted_total"
	CommitDuration         = "flechtwerk_commit_duration_seconds"
	Fenced                 = "flechtwerk_fenced_total"
	TaskRestarts           = "flechtwerk_task_restarts_total"
	Rebalances             = "flechtwerk_rebalances_total"
	RebalanceDuration      = "flechtwerk_rebalance_duration_seconds"
	Tasks                  = "flechtwerk_tasks"
	RestoreRecords         = "flechtwerk_restore_records_total"
	RestoreRemaining       = "flechtwerk_restore_remaining_offsets"
	RestoreProgress        = "flechtwerk_restore_progress_ratio"
	RestoreDuration        = "flechtwerk_restore_duration_seconds"
	ConsumerLag            = "flechtwerk_consumer_lag_offsets"
	StoreEntries           = "flechtwerk_store_entries"
	StoreBytes             = "flechtwerk_store_bytes"
	ConfigEntries          = "flechtwerk_config_entries"
	ExtractorPolls         = "flechtwerk_extractor_polls_total"
	ExtractorPollErrors    = "flechtwerk_extractor_poll_errors_total"
	ExtractorPages         = "flechtwerk_extractor_pages_total"
	ExtractorPollTime      = "flechtwerk_extractor_poll_duration_seconds"
	ExtractorCursorAge     = "flechtwerk_extractor_cursor_age_seconds"
	StandbyLag             = "flechtwerk_standby_lag_offsets"
	BuildInfo              = "flechtwerk_build_info"
	ExtractorPollRetries   = "flechtwerk_extractor_poll_retries_total"
	ExtractorQuarantined   = "flechtwerk_extractor_quarantined_configs"
	SinkWrites             = "flechtwerk_sink_writes_total"
	SinkRecordsWritten     = "flechtwerk_sink_records_written_total"
	SinkWriteErrors        = "flechtwerk_sink_write_errors_total"
	SinkRetries            = "flechtwerk_sink_retries_total"
	SinkWriteDuration      = "flechtwerk_sink_write_duration_seconds"
	SinkCommittedOffset    = "flechtwerk_sink_committed_offset"
)

var catalog = []Metric{
	{RunnerState, Gauge, "state", []string{"state"}, "1 for the runner's current state (starting, restoring, running, rebalancing, stopping, stopped, failed), 0 for the others."},

	{RecordsIn, Counter, "records", []string{"topic", "partition"}, "Input records committed (transaction markers excluded), counted when their transaction commits, or an interval that wrote nothing commits its offsets. Transformer."},
	{RecordsOut, Counter, "records", []string{"topic", "partition"}, "Output records of committed transactions, per output topic (a transformer's emits and dead letters, an extractor's page records; partition is the task or token)."},
	{InputBytes, Counter, "bytes", []string{"topic", "partition"}, "Key plus value bytes of the input records committed (counted like records_in). Transformer."},
	{OutputBytes, Counter, "bytes", []string{"topic", "partition"}, "Key plus value bytes of the output records of committed transactions, per output topic. Transformer."},
	{StateWrites, Counter, "writes", []string{"partition"}, "Changelog writes (puts and tombstones, last write per key per transaction) of committed transactions. Transformer."},
	{StateValueBytes, Histogram, "bytes", nil, "Size of each state value written to the changelog by a committed transaction (tombstones excluded). Transformer."},
	{InvalidRecords, Counter, "records", []string{"policy"}, "Input records the invalid-record policy handled (skip, substitute, dead-letter), counted when they commit. Transformer."},
	{DeadLetters, Counter, "records", []string{"topic"}, "Records routed to a dead-letter topic inside a committed transaction. Transformer."},
	{BatchRecords, Histogram, "records", nil, "Input records per chunk a task processed (at most MaxPollRecords; a transaction holds the chunks of one commit interval). Transformer."},
	{BatchDuration, Histogram, "seconds", nil, "Time of one chunk of a task: transform, and its outputs handed to the open transaction (not the commit). Transformer."},
	{BatchTransformDuration, Histogram, "seconds", nil, "Time of the transform of one chunk, all its records (observed once per chunk; the mean per record is the rate of its _sum over the rate of flechtwerk_batch_records_sum). Transformer."},
	{TxnCommitted, Counter, "transactions", []string{"partition"}, "Transactions committed (a transformer task's commit intervals, an extractor's pages; not the offsets-only commits of intervals that wrote nothing)."},
	{TxnAborted, Counter, "transactions", []string{"partition", "reason"}, "What a task processed since its last commit that ended without one, once per failure: reason transform (a transform error), commit (beginning or committing the transaction, or the offsets-only commit, failed), timeout (BatchTimeout), fenced (another instance took the task)."},
	{CommitDuration, Histogram, "seconds", nil, "Time of one transaction commit: changelog records, result checks, offsets and EndTxn (failed commits included)."},
	{Fenced, Counter, "fences", []string{"partition"}, "Times a producer of this instance was fenced by a newer owner of its transactional ID."},
	{TaskRestarts, Counter, "restarts", []string{"partition"}, "Times a task was closed dirty after a transient broker error of its transaction (or of its start or restore) and re-initialized in place (fenced, restored, re-positioned at the committed offsets) without ending Run. Transformer."},
	{Rebalances, Counter, "rebalances", nil, "Group rebalances this instance took part in (a revocation or an assignment that started one)."},
	{RebalanceDuration, Histogram, "seconds", nil, "Time from the start of a rebalance until every assigned task was restored and fetching."},
	{Tasks, Gauge, "tasks", []string{"state"}, "Tasks (or extractor tokens) of this instance by state: running, restoring, standby (standby replicas this instance keeps of tasks it does not run; see runner.StandbyReplicas)."},
	{RestoreRecords, Counter, "records", []string{"partition"}, "Changelog records applied by restores."},
	{RestoreRemaining, Gauge, "offsets", []string{"partition"}, "Changelog offsets left to read by the restore of a task (0 once restored)."},
	{RestoreProgress, Gauge, "ratio", []string{"partition"}, "Fraction of the changelog partition's offsets a restore has read (1 once restored)."},
	{RestoreDuration, Histogram, "seconds", nil, "Time of one task restore (buckets up to 30 minutes)."},
	{ConsumerLag, Gauge, "offsets", []string{"topic", "partition"}, "Last stable offset minus the group's committed offset, for every partition of the input topics (not only those of this instance's tasks: every live instance exports the same values, aggregate with max by partition); computed at scrape time (at most once per second, one ListOffsets and one OffsetFetch). Transformer and sink."},
	{StoreEntries, Gauge, "entries", []string{"partition"}, "Keys in the store of a running task, counted at scrape time (at most once per 30s per store)."},
	{StoreBytes, Gauge, "bytes", []string{"partition"}, "Disk space of the store of a running task (Pebble DiskSpaceUsage)."},
	{StandbyLag, Gauge, "offsets", []string{"partition"}, "Changelog offsets the store of a standby replica of this instance is behind its changelog partition's last stable offset: what a failover of the task to this instance would replay; computed at scrape time (at most once per second, one ListOffsets). Transformer."},
	{ConfigEntries, Gauge, "entries", nil, "Live configs in the config table. Extractor."},
	{ExtractorPolls, Counter, "polls", []string{"partition"}, "Polls that ended (partition is the token). Extractor."},
	{ExtractorPollErrors, Counter, "polls", []string{"partition"}, "Poll attempts that ended with an error (they end Run unless runner.PollRetry retries them or runner.QuarantineFailingConfigs isolates the config). Extractor."},
	{ExtractorPages, Counter, "pages", []string{"partition"}, "Pages committed (each one transaction). Extractor."},
	{ExtractorPollTime, Histogram, "seconds", nil, "Time of one poll, all its pages included. Extractor."},
	{BuildInfo, Gauge, "info", []string{"version", "go_version", "revision"}, "Always 1: the version of the flechtwerk module the binary was built with (\"(devel)\" or \"unknown\" when not recorded), its Go version and its VCS revision (\"unknown\" when not recorded), from runtime/debug.ReadBuildInfo."},
	{ExtractorCursorAge, Gauge, "seconds", nil, "Seconds since the stalest live config this instance polled last ended a poll successfully. Extractor."},
	{ExtractorPollRetries, Counter, "retries", []string{"partition"}, "Polls tried again after a transient error (runner.PollRetry; partition is the token). Extractor."},
	{ExtractorQuarantined, Gauge, "configs", nil, "Configs this instance isolated after their poll failed (runner.QuarantineFailingConfigs): not polled until their config record changes or the quarantine ends. Extractor."},
	{SinkWrites, Counter, "writes", []string{"topic", "partition"}, "Write calls of a sink that returned nil (one per partition per poll cycle). Sink."},
	{SinkRecordsWritten, Counter, "records", []string{"topic", "partition"}, "Outputs a sink's successful Write calls wrote (a retried batch counts once). Sink."},
	{SinkWriteErrors, Counter, "writes", []string{"topic", "partition"}, "Write calls of a sink that returned an error, retried ones included. Sink."},
	{SinkRetries, Counter, "retries", []string{"topic", "partition"}, "Write calls of a sink tried again after a transient error (runner.SinkRetry). Sink."},
	{SinkWriteDuration, Histogram, "seconds", nil, "Time of one Write call of a sink, failed ones included (not the waits between retries). Sink."},
	{SinkCommittedOffset, Gauge, "offset", []string{"topic", "partition"}, "The last offset this instance committed for the partition to the sink's group (the next to read), once the commit succeeded. Sink."},
}

// Catalog returns every metric a runner registers.
func Catalog() []Metric {
	out := make([]Metric, len(catalog))
	copy(out, catalog)
	return out
}

// Lookup returns the metric named name. The suffixes Prometheus adds to a
// histogram's series (_bucket, _sum, _count) are accepted.
func Lookup(name string) (Metric, bool) {
	for _, m := range catalog {
		if m.Name == name {
			return m, true
		}
		if m.Type == Histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				if name == m.Name+s {
					return m, true
				}
			}
		}
	}
	return Metric{}, false
}
