package mqttbridge_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/engine/bridge"
	"github.com/flechtwerk/flechtwerk/mqttbridge"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// TestDedupeForwardsEachNumberOnce feeds Dedupe numbered records with
// copies and reorderings, one record per batch: it forwards each
// (publisher, number) once, tells publishers apart, takes numbers
// reordered within its window and counts a number older than the whole
// window as a copy.
func TestDedupeForwardsEachNumberOnce(t *testing.T) {
	d, err := transformertest.New(mqttbridge.Dedupe("out", 3), transformertest.InputTopics("in"))
	require.NoError(t, err)
	in := func(pub string, seq int) transformertest.Input {
		return transformertest.Input{Topic: "in", Key: []byte(pub), Value: []byte(pub + strconv.Itoa(seq)),
			Headers: []transformer.Header{{Key: mqttbridge.SeqHeader, Value: []byte(strconv.Itoa(seq))}}}
	}
	for _, tc := range []struct {
		in   transformertest.Input
		want bool
	}{
		{in("a", 1), true},
		{in("a", 1), false}, // a copy
		{in("b", 1), true},  // another publisher
		{in("a", 3), true},
		{in("a", 2), true}, // reordered, within the window
		{in("a", 3), false},
		{in("a", 4), true}, // the window (3) now holds 2, 3, 4
		{in("a", 2), false},
		{in("a", 6), true}, // holds 3, 4, 6
		{in("a", 5), true},
		{in("a", 1), false}, // older than the window
	} {
		before := len(d.Outputs())
		_, err := d.Process(context.Background(), tc.in)
		require.NoError(t, err)
		require.Equal(t, tc.want, len(d.Outputs()) == before+1, "%s", tc.in.Value)
	}

	_, err = d.Process(context.Background(), transformertest.StringInput("in", 0, "a", "no header"))
	require.ErrorIs(t, err, transformer.ErrInvalidRecord)
}

// TestMatch checks the MQTT topic filter matching that routes messages to
// configs.
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/+", "a/b", true},
		{"a/+", "a/b/c", false},
		{"a/+/c", "a/b/c", true},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "a/b", true},
		{"+", "a", true},
		{"+/+", "a", false},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"a/b", "a/b/", false},
		{"a/+", "a/", true},
	} {
		require.Equal(t, tc.want, bridge.Match(tc.filter, tc.topic), "%s on %s", tc.filter, tc.topic)
	}
}
