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
// Each record's value is decoded once when it is read (JSON into C by
// default; see Codec) and then passed through the optional Enrich hook,
// which may add data the config does not carry (a secret, a resolved
// address). Both run once per record, not per lookup. A record that fails
// either ends Run with a *RecordError naming topic, partition and offset:
// a config is never skipped silently.
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
// CodeMissingTopic before it reads anything. Ready is closed once the
// Table has read every partition up to the last stable offset listed when
// Run started; WaitReady blocks until then.
//
// # Concurrency
//
// Get, Keys, Range, Len, Ready, WaitReady and Changed are safe for
// concurrent use, also while Run is reading. Run must be called once. The
// entries returned share their decoded config with the Table: treat them as
// read-only.
package configtopic
