package agent

// headURL is the base URL of the head the worker talks to now.
func (a *Agent) headURL() string {
	if len(a.cfg.heads) == 0 {
		return a.cfg.HeadURL
	}
	return a.cfg.heads[int(a.head.Load())%len(a.cfg.heads)]
}

// nextHead moves to the next head of the list after base failed (a dead
// head, or one that cannot reach its store); with one head it does
// nothing. Concurrent failures of one head move once.
func (a *Agent) nextHead(base string, why error) {
	n := len(a.cfg.heads)
	if n < 2 {
		return
	}
	cur := a.head.Load()
	if a.cfg.heads[int(cur)%n] != base {
		return // another request already moved
	}
	if a.head.CompareAndSwap(cur, (cur+1)%int32(n)) {
		a.log.Warn("head unreachable; moving to the next one", "head", base, "next", a.cfg.heads[int(cur+1)%n], "err", why)
	}
}
