package extract

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/group"
)

// onAssigned creates a token per held partition number and starts its
// fence and restore; polls start once it is ready.
func (rn *run) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	o := rn.o
	held := group.Held(assigned)
	var ns []int32
	for n, k := range held {
		if k != len(o.ConfigTopics) {
			rn.setFatal(fmt.Errorf("extractor: partition %d assigned for %d of %d config topics; the group must use range assignment over co-partitioned config topics (is another application using group %q?)", n, k, len(o.ConfigTopics), o.Group()))
			return
		}
		if n >= rn.n {
			rn.setFatal(fmt.Errorf("extractor: config topics grew from %d partitions to more than %d; the cursor changelog needs a migration (restart with a new application id)", rn.n, n))
			return
		}
		ns = append(ns, n)
	}
	slices.Sort(ns)
	rn.mu.Lock()
	for _, n := range ns {
		if rn.tokens[n] != nil {
			continue
		}
		tk := newToken(rn, n)
		rn.tokens[n] = tk
		rn.wg.Add(1)
		go func() {
			defer rn.wg.Done()
			defer close(tk.initDone)
			if err := tk.init(); err != nil && tk.ctx.Err() == nil {
				rn.setFatal(fmt.Errorf("extractor: %w", err))
			}
			rn.poke()
		}()
	}
	rn.mu.Unlock()
	o.Logger.Info("extractor tokens assigned", "tokens", ns)
}

// onRevoked tears down the tokens of the revoked partitions: their polls
// are canceled and their open pages aborted before the callback returns.
func (rn *run) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ns := map[int32]bool{}
	for _, ps := range revoked {
		for _, p := range ps {
			ns[p] = true
		}
	}
	rn.teardown(rn.takeTokens(ns))
	rn.o.Logger.Info("extractor tokens revoked", "revoked", revoked)
}

// takeTokens removes the tokens in ns (all when ns is nil) from the run.
func (rn *run) takeTokens(ns map[int32]bool) []*token {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	var out []*token
	for n, tk := range rn.tokens {
		if ns == nil || ns[n] {
			out = append(out, tk)
			delete(rn.tokens, n)
		}
	}
	return out
}

func (rn *run) teardown(tks []*token) {
	for _, tk := range tks {
		tk.cancel() // cancel every poll first, then wait for each
	}
	var errs []error
	for _, tk := range tks {
		if err := tk.teardown(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		rn.setFatal(fmt.Errorf("extractor: closing tokens: %w", err))
	}
}
