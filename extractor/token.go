package extractor

// Token returns the ownership token of a config key among tokens tokens:
// Kafka's default partitioner hash (murmur2) of key modulo tokens. A config
// written with Kafka's default partitioner therefore sits on the partition
// whose holder owns it, but ownership follows the key, not the partition the
// record was written to.
func Token(key []byte, tokens int32) int32 {
	if tokens <= 0 {
		return 0
	}
	return int32((murmur2(key) & 0x7fffffff) % uint32(tokens))
}

// murmur2 is the hash of Kafka's default partitioner.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		b = b[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
