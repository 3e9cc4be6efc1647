package runner

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"github.com/flechtwerk/flechtwerk/store"
)

// pruneStores deletes the application's stores unused for longer than the
// retention (see StoreRetention) once, and then periodically in a
// goroutine until the returned stop is called; stop waits for it.
func (r *Runner) pruneStores(ctx context.Context) (stop func()) {
	c := &r.cfg
	if !r.proc.Stateful() || c.retention < 0 {
		return func() {}
	}
	appDir := filepath.Join(c.stateDir, c.appID)
	prune := func() {
		removed, err := store.Prune(appDir, c.retention)
		for _, dir := range removed {
			c.logger.Info("deleted unused store", "dir", dir, "retention", c.retention)
		}
		if err != nil {
			// Housekeeping only: a store that could not be deleted
			// takes disk space, nothing else.
			c.logger.Warn("deleting unused stores", "dir", appDir, "err", err)
		}
	}
	prune()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(min(max(c.retention/4, time.Minute), time.Hour))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				prune()
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
