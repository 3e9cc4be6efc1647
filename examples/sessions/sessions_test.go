package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/transformertest"
)

func clickAt(user, page string, min int) transformertest.Input {
	in := transformertest.StringInput("clicks", 0, user, page)
	in.Timestamp = morning.Add(time.Duration(min) * time.Minute)
	return in
}

func summaries(t *testing.T, b *transformertest.Batch) []Summary {
	t.Helper()
	var out []Summary
	for _, o := range b.Outputs {
		var s Summary
		require.NoError(t, json.Unmarshal(o.Value, &s))
		require.Equal(t, s.User, string(o.Key))
		out = append(out, s)
	}
	return out
}

func at(min int) time.Time { return morning.Add(time.Duration(min) * time.Minute) }

// TestSessions drives the stage without Kafka: sessions close when
// stream time passes their gap, within a batch or later, and the TTL
// closes what stream time no longer reaches.
func TestSessions(t *testing.T) {
	d, err := transformertest.New(newStage(Gap, TTL, "user-sessions"))
	require.NoError(t, err)
	ctx := context.Background()
	d.SetNow(morning)

	// One batch: ana's first session closes before her click at 9:55,
	// whose stream time (bo's 9:40) is past 9:10 + 30m.
	b, err := d.Process(ctx, clickAt("ana", "/", 0), clickAt("ana", "/cart", 10), clickAt("bo", "/", 12),
		clickAt("bo", "/help", 40), clickAt("ana", "/", 55))
	require.NoError(t, err)
	require.Equal(t, []Summary{{User: "ana", Start: at(0), End: at(10), Clicks: 2, Pages: []string{"/", "/cart"}, Reason: "inactive"}}, summaries(t, b))
	require.True(t, b.Outputs[0].Timestamp.Equal(at(40)), "a session's summary is stamped with its close: last click + gap")
	require.Equal(t, []transformertest.Fired{{Timer: b.Fired[0].Timer}}, b.Fired)
	require.Equal(t, "close", b.Fired[0].Name)
	pending := d.Timers(0, []byte("ana"))
	require.Len(t, pending, 1)
	require.True(t, at(55).Add(Gap).Equal(pending[0].Due))

	// Nothing more from bo: his session closes when stream time passes
	// 9:40 + 30m, here through cy's click at 10:11.
	b, err = d.Process(ctx, clickAt("cy", "/", 71))
	require.NoError(t, err)
	require.Equal(t, []Summary{{User: "bo", Start: at(12), End: at(40), Clicks: 2, Pages: []string{"/", "/help"}, Reason: "inactive"}}, summaries(t, b))

	// Input stops: stream time stays at 10:11, ana's 10:25 timer never
	// fires. A day of wall-clock time later (rounded up by at most a
	// 64th of it) her state and cy's expire, each emitting its session.
	d.Advance(TTL - time.Second)
	b, err = d.Tick(ctx)
	require.NoError(t, err)
	require.Empty(t, b.Outputs)
	d.Advance(time.Second + TTL/64)
	b, err = d.Tick(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []Summary{
		{User: "ana", Start: at(55), End: at(55), Clicks: 1, Pages: []string{"/"}, Reason: "expired"},
		{User: "cy", Start: at(71), End: at(71), Clicks: 1, Pages: []string{"/"}, Reason: "expired"},
	}, summaries(t, b))
	require.ElementsMatch(t, []transformertest.Expired{{Key: []byte("ana")}, {Key: []byte("cy")}}, b.Expired)
	require.Empty(t, d.StateKeys(0), "the store holds no state of users gone quiet")
	// Their close timers outlived their state: they fire with none and
	// emit nothing.
	require.Len(t, d.Timers(0, []byte("ana")), 1)
	b, err = d.AdvanceStreamTime(ctx, at(120))
	require.NoError(t, err)
	require.Len(t, b.Fired, 2)
	require.Empty(t, b.Outputs)
	require.Empty(t, d.StateKeys(0))
}

// TestSessionGapWithoutStreamTime: a click that comes after the gap,
// with no click of the partition in between to move stream time, still
// starts a new session.
func TestSessionGapWithoutStreamTime(t *testing.T) {
	d, err := transformertest.New(newStage(Gap, TTL, "user-sessions"))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = d.Process(ctx, clickAt("ana", "/", 0))
	require.NoError(t, err)
	b, err := d.Process(ctx, clickAt("ana", "/late", 45))
	require.NoError(t, err)
	// The 9:30 timer fires before the 9:45 click only if stream time
	// before it reached 9:30: it did not (9:00), so the click itself
	// closes the session, then the timer of the new one is set.
	require.Equal(t, []Summary{{User: "ana", Start: at(0), End: at(0), Clicks: 1, Pages: []string{"/"}, Reason: "inactive"}}, summaries(t, b))
	s, ok, err := transformertest.State[Session](d, 0, []byte("ana"))
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, at(45).Equal(s.Start))
}
