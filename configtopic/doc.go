// Package configtopic keeps a per-process copy of compacted config topics:
// a Table holding the latest value per key, like a Kafka Streams
// GlobalKTable.
//
// Every process reads every partition of the config topics in full, from
// the log start, with read_committed isolation, and keeps reading while it
// runs, so a new or changed config record reaches every instance within a
// fetch. A record with a nil value (a tombstone) removes its key.
//
//	tbl, err := configtopic.New[TenantConfig](
//		configtopic.SeedBrokers("localhost:9092"),
//		configtopic.Topics("tenants"),
//	)
//	if err != nil { ... }                     // every configuration problem, coded
//	go func() { errc <- tbl.Run(ctx) }()      // reads until ctx ends
//	if err := tbl.WaitReady(ctx); err != nil { ... }
//	cfg, ok := tbl.Get([]byte("acme"))
//
// Extractors (package extractor) poll once per live config of their config
// topics; transformers can use a Table to look up configuration by key.
//
// # Decoding and enrichment
//
// A Table is the latest value per key, and it decodes (JSON into C by
// default; see Codec) and enriches (the optional Enrich hook, which may add
// data the config does not carry: a secret, a resolved address) only
// values that enter it:
//
//   - During the bootstrap (see Startup) the Table first reads up to the
//     end, keeping the last record of every key, and then decodes and
//     enriches each surviving value once. A value that a later record of
//     its key replaced is skipped without being decoded, so a bad record
//     that was fixed by a new value no longer stops the Table; Stats counts
//     the skipped values, and each is logged at debug level with topic,
//     partition and offset. A surviving value that fails ends Run with a
//     *RecordError naming its topic, partition and offset.
//   - Once ready, every new record is decoded and enriched once, when it is
//     read. A record that fails ends Run with a *RecordError; the Table
//     keeps what it had before that record.
//
// Neither runs per lookup, and a config is never skipped silently.
//
// # Keys across topics
//
// A Table is keyed by record key alone. A key should live in one config
// topic only: when two topics carry the same key, the record read last
// wins, and the order between topics is not defined.
//
// # Startup
//
// Run reports a missing config topic as a *flechtwerk.ConfigError with
// CodeMissingTopic before it reads anything. It then lists, per partition,
// the log start and the last stable offset, reads every partition from its
// start until its fetch position reaches that last stable offset, installs
// the surviving configs and closes Ready; WaitReady blocks until then. The
// bootstrap ends by fetch position, not by the records it sees: the offsets
// just below the end may hold nothing a read_committed reader is given (an
// aborted batch, a transaction marker, records or batches the log cleaner
// removed), and the Table is ready all the same. Afterwards a consumer reads
// on from those offsets; partitions added to a config topic while Run runs
// are read from their start within about 30 seconds.
//
// # Catching up
//
// A Table follows the log with some lag, and the lag of one process says
// nothing about another's. Sync is the barrier for a process that must
// hold at least what another process saw: it lists the last stable
// offsets of the config topics and waits until the Table reflects every
// record below them. Package extractor calls it when an ownership token
// moves, after the fence: the new owner then holds every config its
// previous owners held, and never mistakes a config it has not read yet
// for a deleted one.
//
// # Concurrency
//
// Get, Keys, Range, Len, Stats, Ready, WaitReady, Sync and Changed are
// safe for concurrent use, also while Run is reading. Run must be called
// once. The entries returned share their decoded config with the Table:
// treat them as read-only.
package configtopic
