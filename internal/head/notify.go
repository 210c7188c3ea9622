package head

import "sync"

// notifier wakes heartbeats held for a worker. A waiter takes the current
// channel before reading state; wake closes it, so no wake-up between the
// read and the wait is lost.
type notifier struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: map[string]chan struct{}{}} }

// wait returns a channel closed by the next wake of worker.
func (n *notifier) wait(worker string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.ch[worker]
	if !ok {
		c = make(chan struct{})
		n.ch[worker] = c
	}
	return c
}

// wake releases every current waiter of worker.
func (n *notifier) wake(worker string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.ch[worker]; ok {
		close(c)
		delete(n.ch, worker)
	}
}

// wakeAll releases every current waiter.
func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for w, c := range n.ch {
		close(c)
		delete(n.ch, w)
	}
}
