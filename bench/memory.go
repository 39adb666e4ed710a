package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// TargetIdleUserBytes is issue 12's target for an idle registered user.
const TargetIdleUserBytes = 16 << 10

// idleMemory: the daemon's heap per registered user without an app-server
// (an API key stored, as a mesh does before the first round), at
// IdleUsers users, measured in this process (the daemon runs in it) after
// the other phases' daemons are gone. The baseline is the target.
func (r *run) idleMemory(ctx context.Context) (err error) {
	n := r.opts.IdleUsers
	r.progress("  %d idle users", n)
	// The real CLI's configuration, though no app-server starts: an API
	// key waits in the daemon's store for the user's first start.
	cfg := r.daemonConfig("idle")
	cfg.MaxUsers = n + 100
	d, c, err := r.startDaemon(cfg, quiet())
	if err != nil {
		return err
	}
	defer func() {
		c.Close()
		err = errors.Join(err, d.Stop())
	}()
	// One user first: the daemon's one-time costs (the edge's peer
	// table, the client's connection) are not the users'.
	if err := c.SetAPIKey(ctx, "idle-first", "sk-bench-memory"); err != nil {
		return err
	}
	heap0, g0 := settledHeap()
	const workers = 32
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := c.SetAPIKey(ctx, fmt.Sprintf("idle-%05d", i), "sk-bench-memory"); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	heap1, g1 := settledHeap()
	per := (float64(heap1) - float64(heap0)) / float64(n) / 1024
	r.rows = append(r.rows, row(fmt.Sprintf("heap per idle registered user (%d users)", n), "KiB",
		[]float64{per}, "target", []float64{TargetIdleUserBytes / 1024},
		fmt.Sprintf("%.2f goroutines per idle user", float64(g1-g0)/float64(n))))
	return nil
}

// settledHeap is the live heap after full collections, and the goroutines.
func settledHeap() (uint64, int) {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}
