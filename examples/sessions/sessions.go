package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/flechtwerk/flechtwerk/transformer"
)

// Session is the state of one user: the session open so far.
type Session struct {
	Start  time.Time `json:"start"`
	Last   time.Time `json:"last"`
	Clicks int       `json:"clicks"`
	Pages  []string  `json:"pages"`
}

// Summary is the record a closed session emits.
type Summary struct {
	User   string    `json:"user"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Clicks int       `json:"clicks"`
	Pages  []string  `json:"pages"`
	// Reason is "inactive" (the gap passed in event time) or "expired"
	// (the user's state was not written for the TTL, by the wall clock:
	// input stopped, so stream time stopped too).
	Reason string `json:"reason"`
}

// sessionizer groups each user's clicks (keyed by user, timestamped
// when they happened) into sessions that close after gap of inactivity,
// in event time: a click sets the user's "close" timer to its timestamp
// plus gap, and the timer fires once the partition's stream time (its
// latest click of any user) passes it. A state that has not been written
// for ttl of wall-clock time expires, emitting what it held: sessions of
// a partition whose input stopped still close.
type sessionizer struct {
	gap time.Duration
	out string
}

func (s sessionizer) Transform(_ context.Context, rec *transformer.Record, st Session, out *transformer.Emitter[Session]) error {
	if out.HadState() && rec.Timestamp.Sub(st.Last) > s.gap {
		// The gap passed before stream time did (no later click of the
		// partition arrived in between): the open session is over.
		if err := s.emit(&out.Outputs, rec.Key, st, "inactive"); err != nil {
			return err
		}
		st = Session{}
	}
	if st.Clicks == 0 {
		st.Start = rec.Timestamp
	}
	if rec.Timestamp.After(st.Last) {
		st.Last = rec.Timestamp
	}
	st.Clicks++
	st.Pages = append(st.Pages, string(rec.Value))
	out.SetState(st)
	out.SetTimer("close", st.Last.Add(s.gap))
	return nil
}

// OnTimer closes the session: the summary's timestamp is the timer's due
// time (the session's end plus the gap). A timer that outlived its
// state (expired by the TTL) finds none and does nothing.
func (s sessionizer) OnTimer(_ context.Context, t transformer.Timer, st Session, out *transformer.Emitter[Session]) error {
	if !out.HadState() {
		return nil
	}
	out.DeleteState()
	return s.emit(&out.Outputs, t.Key, st, "inactive")
}

// emit sends the summary of user's session st.
func (s sessionizer) emit(out *transformer.Outputs, user []byte, st Session, reason string) error {
	b, err := json.Marshal(Summary{User: string(user), Start: st.Start, End: st.Last, Clicks: st.Clicks, Pages: st.Pages, Reason: reason})
	if err != nil {
		return err
	}
	out.Send(s.out, user, b)
	return nil
}

// newStage builds the sessionizer stage.
func newStage(gap, ttl time.Duration, out string) *transformer.Stage[Session] {
	s := sessionizer{gap: gap, out: out}
	return transformer.From[Session](s,
		transformer.StateTTL(ttl, transformer.WallClock),
		transformer.OnExpire(func(_ context.Context, user []byte, st Session, out *transformer.Outputs) error {
			return s.emit(out, user, st, "expired")
		}))
}
