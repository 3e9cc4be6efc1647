// Package metrics is the catalog of the Prometheus metrics a runner
// records, and the HTTP handler of its probes.
//
// Metrics are off by default and nothing is registered globally: pass a
// registry with runner.Metrics(reg). Every metric carries the constant
// label application_id; partition is the task (input partition number) or
// the extractor's token, topic an input topic (an output topic for the
// output metrics). Names are stable and end in their unit (_total for
// counters, _seconds, _bytes, _records, _offsets, _ratio; _info for the
// build info).
// Two runners of one application id cannot share a registry (their series
// would collide); New reports that.
//
// The catalog (Catalog returns it; docs/operations.md explains each and
// gives alert rules):
//
//	flechtwerk_runner_state{state}                       gauge      1 for the current state
//	flechtwerk_records_in_total{topic,partition}         counter    input records committed
//	flechtwerk_records_out_total{topic,partition}        counter    output records committed
//	flechtwerk_input_bytes_total{topic,partition}        counter    key+value bytes in, committed
//	flechtwerk_output_bytes_total{topic,partition}       counter    key+value bytes out, committed
//	flechtwerk_state_writes_total{partition}             counter    changelog writes committed
//	flechtwerk_state_value_bytes                         histogram  size of each state value written
//	flechtwerk_invalid_records_total{policy}             counter    committed records an invalid-record policy handled
//	flechtwerk_dead_letters_total{topic}                 counter    records committed to a dead-letter topic
//	flechtwerk_batch_records                             histogram  records per chunk of a task
//	flechtwerk_batch_duration_seconds                    histogram  chunk time, transform to open transaction
//	flechtwerk_batch_transform_duration_seconds          histogram  transform time of a chunk
//	flechtwerk_transactions_committed_total{partition}   counter    transactions committed
//	flechtwerk_transactions_aborted_total{partition,reason} counter processed, not committed
//	flechtwerk_commit_duration_seconds                   histogram  commit latency
//	flechtwerk_fenced_total{partition}                   counter    producers fenced by a newer owner
//	flechtwerk_task_restarts_total{partition}            counter    tasks re-initialized after a transient error
//	flechtwerk_rebalances_total                          counter    rebalances
//	flechtwerk_rebalance_duration_seconds                histogram  rebalance until every task runs
//	flechtwerk_tasks{state}                              gauge      tasks running, restoring, standby
//	flechtwerk_restore_records_total{partition}          counter    changelog records restored
//	flechtwerk_restore_remaining_offsets{partition}      gauge      changelog offsets left to restore
//	flechtwerk_restore_progress_ratio{partition}         gauge      restore progress, 0..1
//	flechtwerk_restore_duration_seconds                  histogram  restore time
//	flechtwerk_consumer_lag_offsets{topic,partition}     gauge      LSO minus committed offset, every input partition (transformer, sink)
//	flechtwerk_store_entries{partition}                  gauge      keys in a task's store
//	flechtwerk_store_bytes{partition}                    gauge      disk space of a task's store
//	flechtwerk_standby_lag_offsets{partition}            gauge      LSO minus a standby replica's checkpoint
//	flechtwerk_config_entries                            gauge      live configs (extractor)
//	flechtwerk_extractor_polls_total{partition}          counter    polls ended
//	flechtwerk_extractor_poll_errors_total{partition}    counter    polls failed
//	flechtwerk_extractor_pages_total{partition}          counter    pages committed
//	flechtwerk_extractor_poll_duration_seconds           histogram  poll time
//	flechtwerk_extractor_cursor_age_seconds              gauge      since the stalest config's last good poll
//	flechtwerk_extractor_poll_retries_total{partition}   counter    polls retried after a transient error
//	flechtwerk_extractor_quarantined_configs             gauge      configs isolated after a failed poll
//	flechtwerk_sink_writes_total{topic,partition}        counter    sink Write calls that succeeded
//	flechtwerk_sink_records_written_total{topic,partition} counter  outputs successfully written
//	flechtwerk_sink_write_errors_total{topic,partition}  counter    sink Write calls that failed
//	flechtwerk_sink_retries_total{topic,partition}       counter    sink Write calls retried
//	flechtwerk_sink_write_duration_seconds               histogram  time of one sink Write call
//	flechtwerk_sink_committed_offset{topic,partition}    gauge      last offset the sink committed
//	flechtwerk_build_info{version,go_version,revision}   gauge      1, labelled with the build
//
// Values that need I/O or a scan are computed when the registry is
// gathered, from the running Run: the lag of every input partition,
// whichever instance runs it (one ListOffsets and one OffsetFetch, at most
// once per second), the standby lag (one more
// ListOffsets), store entries (a key count, at most once per 30s per
// store) and bytes, the config entries and cursor age. Records, bytes,
// state writes and policy counts are counted when the transaction (or the
// offsets-only commit) that holds them commits. Hot-path
// hooks cost a few observations per chunk and a few counter adds per
// commit, not per record (see BenchmarkHooks in internal/metrics).
//
// # Concurrency
//
// Handler and Catalog are safe for concurrent use.
package metrics
