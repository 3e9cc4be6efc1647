package transformer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The values of Kafka's UtilsTest.testMurmur2 (as Java ints).
func TestMurmur2KafkaValues(t *testing.T) {
	for key, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		require.Equal(t, want, int32(murmur2([]byte(key))), "key %q", key)
	}
}
