package extractor

import "github.com/flechtwerk/flechtwerk/transformer"

// Token returns the ownership token of a config key among tokens tokens:
// Kafka's default partitioner hash (murmur2) of key modulo tokens. A config
// written with Kafka's default partitioner therefore sits on the partition
// whose holder owns it, but ownership follows the key, not the partition the
// record was written to.
func Token(key []byte, tokens int32) int32 {
	if tokens <= 0 {
		return 0
	}
	return transformer.Murmur2(key, tokens)
}
