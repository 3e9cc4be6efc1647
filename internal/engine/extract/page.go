package extract

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/store"
)

// pollOnce runs the poll function once for one config and commits its
// trailing page.
func (rn *run) pollOnce(tk *token, e configtopic.Entry[any]) error {
	o := rn.o
	pctx, cancel := context.WithCancelCause(tk.ctx)
	defer cancel(nil)
	p := &page{rn: rn, tk: tk, key: e.Key, ctx: pctx}
	p.timer = time.AfterFunc(o.PageTimeout, func() {
		cancel(fmt.Errorf("%w (%v): the page was aborted; commit smaller pages or raise PageTimeout (below TransactionTimeout %v)",
			extractor.ErrPageTimeout, o.PageTimeout, o.TransactionTimeout))
	})
	p.armed = true
	defer p.timer.Stop()

	cursor, found, err := tk.cursor(e.Key)
	if err != nil {
		if tk.ctx.Err() != nil {
			return nil
		}
		return &extractor.PollError{Key: e.Key, Err: fmt.Errorf("reading cursor: %w", err)}
	}
	began := time.Now()
	perr := callPoll(rn.e.x, pctx, e, cursor, found, p)
	p.timer.Stop()
	p.armed = false
	if pe := (*flechtwerk.PanicError)(nil); errors.As(perr, &pe) {
		// A bug, not a canceled poll: reported even while stopping.
		return &extractor.PollError{Key: e.Key, Err: perr}
	}

	if cause := context.Cause(pctx); errors.Is(cause, extractor.ErrPageTimeout) {
		return &extractor.PollError{Key: e.Key, Err: cause}
	}
	if tk.ctx.Err() != nil {
		// The token moved or Run is stopping: the open page is
		// dropped (aborted) and the new owner resumes from the last
		// committed cursor.
		o.Logger.Debug("poll canceled; open page aborted", "config", string(e.Key), "token", tk.n, "records", len(p.recs))
		return nil
	}
	if p.err != nil {
		return p.err
	}
	if perr != nil {
		return &extractor.PollError{Key: e.Key, Err: perr}
	}
	if len(p.recs) > 0 {
		if err := p.commitNow(pctx, nil, false); err != nil {
			if tk.ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	o.Logger.Debug("poll done", "config", string(e.Key), "token", tk.n, "pages", p.pages, "took", time.Since(began))
	return nil
}

// callPoll runs the poll function (and the cursor codec), recovering a
// panic into a *flechtwerk.PanicError.
func callPoll(x stage.Extractor, ctx context.Context, e configtopic.Entry[any], cursor []byte, found bool, p *page) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return x.Poll(ctx, e, cursor, found, p)
}

// page is the open page of one poll: records buffered until the page
// closes. Buffering keeps the token's producer free for the pages of its
// other configs: a page's transaction is open only while it commits.
type page struct {
	rn    *run
	tk    *token
	key   []byte
	ctx   context.Context
	timer *time.Timer
	armed bool // timer runs: the page is open and the poll has not returned
	recs  []*kgo.Record
	pages int
	err   error
}

// Key is the config key of the poll.
func (p *page) Key() []byte { return p.key }

// Add adds r to the open page. Its partition is -1 (the partitioner
// chooses it; -1 until then tells a produce error that none was
// assigned) or the explicit partition it goes to.
// A record of the cursor changelog fails the poll: only the engine
// writes cursors.
func (p *page) Add(r *kgo.Record) {
	if r.Topic == p.rn.changelog {
		p.fail(flechtwerk.Errorf(flechtwerk.CodeDuplicateTopic, "output",
			"config %q: a record names the cursor changelog %s; a poll must not write the changelog", p.key, r.Topic))
		return
	}
	p.recs = append(p.recs, r)
}

// Pending returns how many records the open page holds.
func (p *page) Pending() int { return len(p.recs) }

// Commit closes the page with a new cursor (Emitter.Commit).
func (p *page) Commit(ctx context.Context, cursor []byte) error { return p.commit(ctx, cursor, true) }

// Fail makes the poll fail with err, unless it failed already.
func (p *page) Fail(err error) { p.fail(err) }

func (p *page) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// commit closes the page, with a new cursor when hasCursor.
func (p *page) commit(ctx context.Context, cursor []byte, hasCursor bool) error {
	if p.err != nil {
		return p.err
	}
	if !p.armed {
		p.fail(fmt.Errorf("extractor: config %q: Commit called after the poll function returned", p.key))
		return p.err
	}
	if !p.timer.Stop() {
		// The page timed out: its context carries the cause.
		<-p.ctx.Done()
	}
	if err := p.commitNow(ctx, cursor, hasCursor); err != nil {
		return err
	}
	p.timer.Reset(p.rn.o.PageTimeout)
	return nil
}

func (p *page) commitNow(ctx context.Context, cursor []byte, hasCursor bool) error {
	if cause := context.Cause(p.ctx); cause != nil {
		if errors.Is(cause, extractor.ErrPageTimeout) {
			p.fail(&extractor.PollError{Key: p.key, Err: cause})
		} else {
			p.fail(fmt.Errorf("extractor: config %q: page aborted: %w", p.key, cause))
		}
		return p.err
	}
	var w *store.Write
	if hasCursor {
		w = &store.Write{Key: p.key, Value: cursor}
	}
	if err := p.tk.commit(ctx, p.key, p.recs, w); err != nil {
		p.fail(fmt.Errorf("extractor: committing page of config %q (token %d): %w", p.key, p.tk.n, err))
		return p.err
	}
	p.rn.o.Metrics.Page(p.tk.n, p.recs)
	p.recs = nil
	p.pages++
	return nil
}
