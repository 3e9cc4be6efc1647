package extract

import (
	"errors"
	"sort"
	"time"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/retry"
)

// quarantine is why and since when a config is isolated.
type quarantine struct {
	err   error
	since time.Time
	until time.Time // zero: until the config record changes
	// rec is the config record the poll failed with: another record of
	// the key ends the quarantine.
	topic     string
	partition int32
	offset    int64
}

// Quarantined is a config isolated after its poll failed
// (runner.QuarantineFailingConfigs).
type Quarantined struct {
	Key   []byte
	Err   error
	Since time.Time
	// Until is when it is polled again unless its config changes first;
	// zero: only once its config changes.
	Until time.Time
}

// Quarantined returns the configs this instance isolated, by key.
func (e *Engine) Quarantined() []Quarantined {
	e.mu.Lock()
	rn := e.cur
	e.mu.Unlock()
	if rn == nil {
		return nil
	}
	rn.mu.Lock()
	var out []Quarantined
	for key, st := range rn.sched {
		if q := st.quar; q != nil {
			out = append(out, Quarantined{Key: []byte(key), Err: q.err, Since: q.since, Until: q.until})
		}
	}
	rn.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return string(out[i].Key) < string(out[j].Key) })
	return out
}

// pollPolicy returns the retry policy of polls: the PollRetry policy,
// whose classifier sees only *extractor.PollError (the token's
// transaction errors are never retried); nil without one.
func pollPolicy(p *retry.Policy) *retry.Policy {
	if p == nil {
		return nil
	}
	q := *p
	q.Transient = func(err error) bool {
		var pe *extractor.PollError
		return errors.As(err, &pe) && p.Transient(err)
	}
	return &q
}

// isolate quarantines the config of e after err, when the quarantine is
// on and err is the config's own (an *extractor.PollError); it reports
// whether it did.
func (rn *run) isolate(st *schedule, e configtopic.Entry[any], token int32, err error) bool {
	var pe *extractor.PollError
	if !rn.o.Retry.Quarantine || !errors.As(err, &pe) {
		return false
	}
	now := time.Now()
	q := &quarantine{err: err, since: now, topic: e.Topic, partition: e.Partition, offset: e.Offset}
	if d := rn.o.Retry.QuarantineFor; d > 0 {
		q.until = now.Add(d)
	}
	rn.mu.Lock()
	st.quar = q
	rn.mu.Unlock()
	rn.o.Logger.Error("config quarantined after its poll failed; its cursor is unchanged, the other configs go on",
		"config", string(e.Key), "token", token, "until", q.until, "err", err)
	return true
}

// released reports whether the quarantine q of a config whose record is
// now e has ended at now.
func (q *quarantine) released(e configtopic.Entry[any], now time.Time) bool {
	if e.Topic != q.topic || e.Partition != q.partition || e.Offset != q.offset {
		return true
	}
	return !q.until.IsZero() && !now.Before(q.until)
}
