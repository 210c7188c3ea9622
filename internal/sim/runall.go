package sim

import (
	"context"
	"runtime"
	"sync"
)

// RunAll runs the named policies on the workload, each on its own
// simulated cloud with opts.Seed (opts.Policy and opts.Progress are set
// per run), at most parallel at once (GOMAXPROCS when parallel <= 0). The
// runs share nothing they write, so the results are those of running them
// one by one, in the order of names. progress, when set, gets the mean
// fraction of the runs done; calls to it are serialized.
func RunAll(ctx context.Context, cfg *Config, w *Workload, names []string, opts Options, parallel int,
	progress func(fraction float64)) ([]*Result, []error) {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	results := make([]*Result, len(names))
	errs := make([]error, len(names))
	var mu sync.Mutex
	fractions := make([]float64, len(names))
	report := func(i int, f float64) {
		if progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fractions[i] = f
		sum := 0.0
		for _, x := range fractions {
			sum += x
		}
		progress(sum / float64(len(names)))
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			o := opts
			o.Policy = name
			o.Progress = func(f float64) { report(i, f) }
			results[i], errs[i] = Run(ctx, cfg, w, o)
			report(i, 1)
		}()
	}
	wg.Wait()
	return results, errs
}
