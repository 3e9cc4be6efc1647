// Package flechtwerk holds what every part of Flechtwerk shares: the
// configuration error type and the stable codes it carries.
//
// Flechtwerk processes Kafka streams with exactly-once delivery. Users write
// a transformer (package transformer, run by package runner) or an
// extractor (package extractor, run by extractor.NewRunner). Each task
// commits its outputs, its state changelog writes and its input offsets in
// one Kafka transaction, so a read_committed reader sees every input's
// effect exactly once across crashes, restarts, rebalances and zombies.
//
// Every configuration problem is reported before anything runs, as a
// *ConfigError whose Code is stable across releases; match it with
// errors.Is against the sentinel of the same code:
//
//	if errors.Is(err, flechtwerk.ErrMissingTopic) { ... }
//
// New and Run report every problem they find at once (errors.Join).
package flechtwerk
