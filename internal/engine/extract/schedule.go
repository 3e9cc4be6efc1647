package extract

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/store"
)

// schedule is the poll schedule of one config key. Every live config has
// one, whether its token is held here or not; a tombstoned config keeps
// its schedule until its cursor is deleted (DeleteCursors).
type schedule struct {
	running bool      // a poll or a cursor delete of the key runs
	due     time.Time // the next poll starts at or after due; zero: at once
	woken   time.Time // when Wake was called; zero: not woken
	// quar is the quarantine of a config whose poll failed; nil: none.
	quar *quarantine
}

// job is a due poll or cursor delete.
type job struct {
	key string
	e   configtopic.Entry[any]
	tk  *token
	st  *schedule
	due time.Time
	del bool // delete the cursor of a tombstoned config
}

// startDue starts the polls of the live, unsuspended configs of ready
// tokens that are due (their interval passed, or Wake was called) and not
// running, oldest due first, while concurrency slots are free; and the
// cursor deletes of tombstoned configs (DeleteCursors), before any poll.
// Due polls left without a slot keep their due time, so they go first
// once a finishing poll frees a slot and wakes the loop. It returns when
// the next config falls due.
func (rn *run) startDue() time.Time {
	o := rn.o
	now := time.Now()
	next := now.Add(o.PollInterval)
	live := map[string]bool{}
	var jobs []job
	bad := false
	quarantined := 0
	rn.mu.Lock()
	defer rn.mu.Unlock()
	defer func() { o.Metrics.Quarantined(quarantined) }()
	rn.table.Range(func(e configtopic.Entry[any]) bool {
		key := string(e.Key)
		live[key] = true
		st := rn.sched[key]
		if st == nil {
			st = &schedule{}
			rn.sched[key] = st
		}
		susp, err := extractor.Suspended(e.Record)
		if err != nil {
			rn.setFatal(err)
			bad = true
			return true // every live key is seen: none looks tombstoned
		}
		if st.quar != nil {
			if tk := rn.tokens[extractor.Token(e.Key, rn.n)]; tk == nil || tk.ctx.Err() != nil {
				// The token left this instance: its owner decides.
				st.quar = nil
			} else if !st.quar.released(e, now) {
				quarantined++
				if u := st.quar.until; !u.IsZero() && u.Before(next) {
					next = u
				}
				return true
			} else {
				o.Logger.Info("config released from quarantine", "config", key, "since", st.quar.since)
				st.quar, st.due = nil, time.Time{}
			}
		}
		if susp || st.running {
			return true
		}
		tk := rn.tokens[extractor.Token(e.Key, rn.n)]
		if tk == nil || !tk.ready.Load() || tk.ctx.Err() != nil {
			return true
		}
		due := st.due
		if !st.woken.IsZero() && st.woken.Before(due) {
			due = st.woken
		}
		if now.Before(due) {
			if due.Before(next) {
				next = due
			}
			return true
		}
		jobs = append(jobs, job{key: key, e: e, tk: tk, st: st, due: due})
		return true
	})
	if bad {
		return next // Run ends
	}
	for key, st := range rn.sched {
		if live[key] || st.running {
			continue
		}
		tk := rn.tokens[extractor.Token([]byte(key), rn.n)]
		if o.KeepCursors || tk == nil || tk.ctx.Err() != nil {
			// A config added again starts at once. A token held
			// elsewhere is swept by its owner (token.init).
			delete(rn.sched, key)
			continue
		}
		if tk.ready.Load() {
			jobs = append(jobs, job{key: key, tk: tk, st: st, del: true}) // zero due: first
		}
	}
	slices.SortFunc(jobs, func(a, b job) int {
		if d := a.due.Compare(b.due); d != 0 {
			return d
		}
		return strings.Compare(a.key, b.key)
	})
	for _, j := range jobs {
		select {
		case rn.sem <- struct{}{}:
		default:
			return next // a finishing poll wakes the loop
		}
		j.st.running = true
		j.tk.polls.Add(1)
		rn.wg.Add(1)
		if j.del {
			go rn.dropCursor(j.tk, j.key, j.st)
			continue
		}
		j.st.due, j.st.woken = now.Add(o.PollInterval), time.Time{}
		go rn.poll(j.tk, j.e, j.st)
	}
	return next
}

// wakeKey makes key due at once. It reports whether this instance holds
// the key's token and the key is a live, unsuspended config.
func (rn *run) wakeKey(key []byte) bool {
	e, ok := rn.table.Get(key)
	if !ok {
		return false
	}
	if susp, err := extractor.Suspended(e.Record); susp || err != nil {
		return false
	}
	rn.mu.Lock()
	st := rn.sched[string(key)]
	if st == nil {
		st = &schedule{}
		rn.sched[string(key)] = st
	}
	if st.woken.IsZero() {
		st.woken = time.Now()
	}
	held := rn.tokens[extractor.Token(key, rn.n)] != nil
	rn.mu.Unlock()
	rn.poke()
	return held
}

// dropCursor deletes the cursor of the tombstoned config key: a changelog
// tombstone in a transaction of the token, like a page's cursor. A key
// without a cursor writes nothing.
func (rn *run) dropCursor(tk *token, key string, st *schedule) {
	done := false
	defer func() {
		<-rn.sem
		rn.mu.Lock()
		st.running = false
		if done && rn.sched[key] == st {
			delete(rn.sched, key)
		}
		rn.mu.Unlock()
		tk.polls.Done()
		rn.wg.Done()
		rn.poke()
	}()
	if err := tk.commit(tk.ctx, []byte(key), nil, &store.Write{Key: []byte(key), Delete: true}); err != nil {
		if tk.ctx.Err() == nil {
			rn.setFatal(fmt.Errorf("extractor: deleting the cursor of tombstoned config %q (token %d): %w", key, tk.n, err))
		}
		return
	}
	done = true
	rn.o.Logger.Debug("cursor of tombstoned config deleted", "config", key, "token", tk.n)
}

func (rn *run) poll(tk *token, e configtopic.Entry[any], st *schedule) {
	defer func() {
		<-rn.sem
		rn.mu.Lock()
		st.running = false
		rn.mu.Unlock()
		tk.polls.Done()
		rn.wg.Done()
		rn.poke()
	}()
	m := rn.o.Metrics
	err := rn.pollPol.Do(tk.ctx, func() error {
		began := time.Now()
		err := rn.pollOnce(tk, e)
		m.Polled(tk.n, e.Key, began, err)
		return err
	}, func(err error, wait time.Duration) {
		m.PollRetried(tk.n)
		rn.o.Logger.Warn("poll failed with a transient error, retrying", "config", string(e.Key), "token", tk.n, "wait", wait, "err", err)
	})
	if err == nil {
		return
	}
	if pe := (*extractor.PollError)(nil); tk.ctx.Err() != nil && !errors.As(err, &pe) {
		// The token moved or Run stops during a retry's wait: not a
		// failure (pollOnce returns only a PollError then).
		return
	}
	if !rn.isolate(st, e, tk.n, err) {
		rn.setFatal(err)
	}
}
