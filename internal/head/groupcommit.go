package head

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// maxGroupInstances bounds the instances committed in one transaction.
const maxGroupInstances = 4096

// groupCommit batches concurrent submits into one SQLite transaction (group
// commit): the first submitter to arrive becomes the leader and commits
// every submit queued meanwhile, in arrival order, then the ones queued
// while it committed, until the queue is empty. Each submitter is answered
// only after the transaction holding its instances has committed, so a
// submit is as durable as before; the transaction's fixed costs (begin,
// statement preparation, WAL commit) are paid once per batch instead of
// once per submit.
//
// A batch is all or nothing; if it fails (a duplicate name, in the store
// or between two submits of the batch), each of its submits is retried
// alone, so one bad submit fails only itself.
type groupCommit struct {
	st interface {
		InsertInstances(ctx context.Context, ins []store.Instance, now time.Time) error
	}

	// max bounds the instances of one batch; maxGroupInstances when zero
	// (a store with a smaller atomic batch says so with MaxInsertBatch).
	max int

	mu      sync.Mutex
	queue   []*groupEntry
	leading bool
}

type groupEntry struct {
	ins  []store.Instance
	now  time.Time
	done chan error
}

// insert stores ins (one submit) and returns when it is committed.
func (g *groupCommit) insert(ctx context.Context, ins []store.Instance, now time.Time) error {
	e := &groupEntry{ins: ins, now: now, done: make(chan error, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, e)
	if g.leading {
		g.mu.Unlock()
		return <-e.done
	}
	g.leading = true
	// The batch carries other submitters' instances: it must not fail
	// because this request's client went away.
	bctx := context.WithoutCancel(ctx)
	// Let submits already being decoded on other goroutines join the batch.
	g.mu.Unlock()
	runtime.Gosched()
	g.mu.Lock()
	for len(g.queue) > 0 {
		n, size := 0, 0
		limit := maxGroupInstances
		if g.max > 0 {
			limit = g.max
		}
		for n < len(g.queue) && (n == 0 || size+len(g.queue[n].ins) <= limit) {
			size += len(g.queue[n].ins)
			n++
		}
		batch := g.queue[:n:n]
		g.queue = g.queue[n:]
		g.mu.Unlock()
		g.commit(bctx, batch, size)
		g.mu.Lock()
	}
	g.queue = nil
	g.leading = false
	g.mu.Unlock()
	return <-e.done
}

func (g *groupCommit) commit(ctx context.Context, batch []*groupEntry, size int) {
	if len(batch) == 1 {
		batch[0].done <- g.st.InsertInstances(ctx, batch[0].ins, batch[0].now)
		return
	}
	all := make([]store.Instance, 0, size)
	for _, e := range batch {
		all = append(all, e.ins...)
	}
	// Every instance carries its own submit's times (set by Submit), so the
	// batch's now only fills what is missing.
	if err := g.st.InsertInstances(ctx, all, batch[len(batch)-1].now); err == nil {
		for _, e := range batch {
			e.done <- nil
		}
		return
	}
	for _, e := range batch {
		e.done <- g.st.InsertInstances(ctx, e.ins, e.now)
	}
}

// newGroupCommit batches submits into st, at most st.MaxInsertBatch()
// instances per batch when st says it (the etcd store: one transaction).
func newGroupCommit(st Store) *groupCommit {
	g := &groupCommit{st: st}
	if b, ok := st.(interface{ MaxInsertBatch() int }); ok {
		g.max = b.MaxInsertBatch()
	}
	return g
}
