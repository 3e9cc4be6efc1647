// Package bench measures the throughput of Flechtwerk against a plain
// franz-go loop, in the same run, on the embedded broker (kfake) or on the
// cluster named by KAFKA_BROKERS.
//
// Run it with a fixed record count (one op is one record):
//
//	go test ./bench -run '^$' -bench . -benchtime 200000x
//	KAFKA_BROKERS=localhost:9092 go test ./bench -run '^$' -bench . -benchtime 100000x
//
// BenchmarkCounter has two sub-benchmarks over the same workload: a counter
// per key (1000 keys) over an input topic of 4 partitions, one output per
// input.
//
//   - baseline: the idiomatic at-least-once loop, no transactions: one group
//     consumer reading uncommitted, counting in memory, producing the
//     outputs (ProduceSync) and committing the poll's offsets
//     (CommitOffsetsSync) after every poll of at most 500 records.
//   - eos: runner.Run over transformer.New with the default options
//     (MaxPollRecords 500): per poll, one transaction per task holding its
//     outputs, its changelog writes (Pebble state) and its offsets.
//
// Each run creates fresh topics, starts the consumer and lets it process one
// warm-up record per partition (group join, fencing, restore are not timed),
// holds it, pre-produces b.N records, and times draining them: until the
// committed offsets reach the end offsets. It reports records/s, and eos
// reports x-baseline, its rate over the baseline's from the same process
// (with -count, over the last baseline run).
// The outputs are counted (not timed) to check every record produced one.
// B/op and allocs/op count the whole process: with kfake that includes the
// embedded broker.
//
// BenchmarkTransformerProcess and BenchmarkDriver measure the transform path
// without Kafka: one transformer.Process call per record, and batches of 500
// through transformertest (bucketing by key, state threading, dedupe).
//
// The package has no tests: without -bench, go test only compiles it.
package bench
