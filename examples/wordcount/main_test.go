package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWordCount runs the example on its embedded broker and checks every
// final count against the words of the sentences it produced: each word
// counted exactly once per occurrence, across the two stages.
func TestWordCount(t *testing.T) {
	want := map[string]int{}
	for _, s := range sentences {
		for _, w := range strings.Fields(s) {
			want[w]++
		}
	}
	got, err := run("", "wordcount", "sentences", "word-counts", 3, false)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, 5, got["the"])
}
