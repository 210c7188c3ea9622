package head

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tide-project/tide/internal/etcdstore"
)

// Several heads on one etcd cluster (Config.Store = "etcd://..."):
//
//   - Every head serves the whole API. Reads come from etcd; writes
//     (submit, cancel, delete, register, heartbeat, cordon) are etcd
//     transactions that compare revisions, so a write made on any head is
//     as safe as one made on the leader: none is forwarded.
//   - One head leads, chosen by an etcd election (concurrency.Election on
//     a lease of Config.LeaseTTL). Only the leader places instances, runs
//     liveness and runs the pool controllers (Head.WhileLeading). Its
//     placements and journal writes carry a fence (the election key's
//     creation revision), so a deposed leader's late writes are refused;
//     a head that does not lead has a fence no key matches.
//   - Each head watches the prefix: a change of a worker's key (its
//     generation moves with every change of its desired set) wakes the
//     heartbeats held for it on this head, so a worker may long-poll any
//     head; new instances poke the leader's scheduler; new events wake
//     event followers.
//   - When the leader's process or machine dies, its lease expires and a
//     standby wins the election within about LeaseTTL; the pool
//     controllers it starts raise their journal epoch, so the old leader's
//     provider calls are refused too (provider fencing).

// notLeaderKey is a fence no key matches: fenced writes of a head that
// does not lead fail.
const notLeaderKey = "election-none"

// ha is the state of a head on etcd.
type ha struct {
	st *etcdstore.Store
	// self is this head's URL, the value it campaigns with.
	self atomic.Pointer[string]
	// leading is set while this head leads; leader is the last leader seen.
	leading atomic.Bool
	leader  atomic.Pointer[string]

	mu sync.Mutex
	// onLead are run (each in its goroutine) while this head leads.
	onLead []func(ctx context.Context)
}

// newHA returns the HA state of a head whose store is etcd, else nil.
func newHA(st Store) *ha {
	es, ok := st.(etcdStore)
	if !ok {
		return nil
	}
	es.SetFence(es.Prefix()+notLeaderKey, math.MaxInt64)
	return &ha{st: es.Store}
}

// LeaderInfo says which head leads: Self when this one, URL the leader's
// (empty when unknown), HA false for a single head on SQLite (it always
// leads).
type LeaderInfo struct {
	HA     bool   `json:"ha"`
	Self   bool   `json:"self"`
	Leader string `json:"leader"`
	Store  string `json:"store"`
}

// Leader reports which head leads.
func (h *Head) Leader() LeaderInfo {
	if h.ha == nil {
		return LeaderInfo{Self: true, Store: "sqlite"}
	}
	li := LeaderInfo{HA: true, Self: h.ha.leading.Load(), Store: "etcd"}
	if p := h.ha.leader.Load(); p != nil {
		li.Leader = *p
	}
	return li
}

// WhileLeading registers fn to run, in its own goroutine, each time this
// head becomes leader, with a context that ends when it stops leading. A
// head on SQLite leads from RunLoops' start to its end.
func (h *Head) WhileLeading(fn func(ctx context.Context)) {
	if h.ha == nil {
		h.haMu.Lock()
		h.onLeadLocal = append(h.onLeadLocal, fn)
		h.haMu.Unlock()
		return
	}
	h.ha.mu.Lock()
	h.ha.onLead = append(h.ha.onLead, fn)
	h.ha.mu.Unlock()
}

// setListenAddr records the address Serve listens on: the URL a head
// campaigns with when Config.AdvertiseURL is empty.
func (h *Head) setListenAddr(a net.Addr) {
	if h.ha == nil {
		return
	}
	u := h.cfg.AdvertiseURL
	if u == "" {
		u = h.Scheme() + "://" + a.String()
	}
	h.ha.self.Store(&u)
}

// runLeaderLoops runs the loops only the leader runs (scheduling,
// liveness, and what WhileLeading registered): at once for a head on
// SQLite, each time it leads for a head on etcd.
func (h *Head) runLeaderLoops(ctx context.Context) {
	if h.ha == nil {
		h.haMu.Lock()
		fns := h.onLeadLocal
		h.haMu.Unlock()
		h.lead(ctx, fns)
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); h.watchStore(ctx) }()
	for ctx.Err() == nil {
		if err := h.campaignOnce(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("leader election failed; trying again", "err", err)
			h.pause(ctx, 500*time.Millisecond)
		}
	}
	wg.Wait()
}

// lead runs the leader's loops and fns until ctx ends.
func (h *Head) lead(ctx context.Context, fns []func(context.Context)) {
	var wg sync.WaitGroup
	wg.Add(2 + len(fns))
	go func() { defer wg.Done(); h.scheduleLoop(ctx) }()
	go func() { defer wg.Done(); h.livenessLoop(ctx) }()
	for _, fn := range fns {
		go func() { defer wg.Done(); fn(ctx) }()
	}
	wg.Wait()
}

func (h *Head) pause(ctx context.Context, d time.Duration) {
	t := h.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

// campaignOnce opens a session, waits to be elected, leads until the
// session is lost or ctx ends, then resigns.
func (h *Head) campaignOnce(ctx context.Context) error {
	cli := h.ha.st.Client()
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	defer scancel()
	ttl := max(int(math.Ceil(h.cfg.LeaseTTL.Seconds())), 1)
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithContext(sctx))
	if err != nil {
		return err
	}
	defer sess.Close() // revokes the lease: a stopped head hands over at once
	el := concurrency.NewElection(sess, h.ha.st.Prefix()+"election/")
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	go func() {
		for resp := range el.Observe(octx) {
			if len(resp.Kvs) > 0 {
				v := string(resp.Kvs[0].Value)
				h.ha.leader.Store(&v)
			}
		}
	}()
	self := h.cfg.AdvertiseURL
	if p := h.ha.self.Load(); p != nil {
		self = *p
	}
	cctx, ccancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-sess.Done(): // lease lost while waiting
		case <-cctx.Done():
		}
		ccancel()
	}()
	err = el.Campaign(cctx, self)
	ccancel()
	if err != nil {
		return err
	}
	h.ha.st.SetFence(el.Key(), el.Rev())
	h.ha.leading.Store(true)
	h.ha.leader.Store(&self)
	h.log.Info("leading: this head places instances, runs liveness and the pool controllers",
		"url", self, "election_key", el.Key())
	lctx, lcancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-sess.Done():
			h.log.Warn("lost the lead: the election lease expired (etcd unreachable or too slow?)")
		case <-lctx.Done():
		}
		lcancel()
	}()
	h.ha.mu.Lock()
	fns := h.ha.onLead
	h.ha.mu.Unlock()
	h.Poke()
	h.lead(lctx, fns)
	lcancel()
	h.ha.leading.Store(false)
	h.ha.st.SetFence(h.ha.st.Prefix()+notLeaderKey, math.MaxInt64)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer rcancel()
	_ = el.Resign(rctx)
	return nil
}

// watchStore follows every change under the store's prefix and wakes what
// waits on this head: heartbeats held for a worker whose key changed, the
// scheduler (when leading) on new or changed instances and workers, event
// followers on new events. When the watch breaks, every waiter is woken
// (nothing missed is lost: they re-read the store) and it starts again.
func (h *Head) watchStore(ctx context.Context) {
	cli, pre := h.ha.st.Client(), h.ha.st.Prefix()
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range cli.Watch(wctx, pre, clientv3.WithPrefix()) {
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				h.storeChanged(strings.TrimPrefix(string(ev.Kv.Key), pre))
			}
		}
		cancel()
		h.notify.wakeAll()
		h.evWake.wakeAll()
		h.Poke()
		h.pause(ctx, 200*time.Millisecond)
	}
}

func (h *Head) storeChanged(key string) {
	switch {
	case strings.HasPrefix(key, "workers/"):
		h.notify.wake(strings.TrimPrefix(key, "workers/"))
		h.Poke()
	case strings.HasPrefix(key, "instances/"), strings.HasPrefix(key, "cordons/"):
		h.Poke()
	case strings.HasPrefix(key, "events/"):
		h.evWake.wake("")
		h.changes.bump()
	}
}

// serveLeader answers GET /leader: which head leads (LeaderInfo).
func (h *Head) serveLeader(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(h.Leader())
}
