package runner

import (
	"context"
	"sync"
	"time"

	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task"
)

// pruneStores deletes the application's stores unused for longer than the
// retention (see StoreRetention) once, and then periodically in a
// goroutine until the returned stop is called; stop waits for it.
func (r *Runner) pruneStores(ctx context.Context) (stop func()) {
	c := &r.cfg
	if r.proc != nil && !task.KeepsState(r.proc) || c.StoreRetention < 0 {
		return func() {}
	}
	appDir := c.AppDir()
	prune := func() {
		removed, err := store.Prune(appDir, c.StoreRetention)
		for _, dir := range removed {
			c.Logger.Info("deleted unused store", "dir", dir, "retention", c.StoreRetention)
		}
		if err != nil {
			// Housekeeping only: a store that could not be deleted
			// takes disk space, nothing else.
			c.Logger.Warn("deleting unused stores", "dir", appDir, "err", err)
		}
	}
	prune()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(min(max(c.StoreRetention/4, time.Minute), time.Hour))
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
