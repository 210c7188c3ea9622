package controller

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/reconcile"
	"github.com/tide-project/tide/sdk/provider"
)

// drainPhase is where a node is in a drain.
type drainPhase uint8

const (
	drainNone      drainPhase = iota
	drainCordoning            // the reconciler asked; Cordon has not succeeded yet
	drainWaiting              // cordoned; waiting until the workload is empty
	drainUnbinding            // provider Drain accepted; waiting for the machine to be Idle
	drainDone                 // DrainComplete sent; Terminate follows
)

// node is the machine serving one reconciler ordinal.
type node struct {
	id   reconcile.NodeID
	rec  Record // as journaled, Intent create
	host string
	// confirmed: the provider acknowledged the Create or listed the
	// machine. Unconfirmed machines are Created again (a replay) each tick
	// until the provider shows them.
	confirmed bool
	// joined: NodeJoined was sent; the reconciler counts the node current.
	joined bool
	// deadline is when the current launch, rejoin or unbinding drain must
	// be done; zero when nothing is under way.
	deadline time.Time
	// tries counts consecutive failed attempts of the current Create or
	// Configure.
	tries        int
	drain        drainPhase
	uncordonOwed bool // an Uncordon failed and is retried
	// listAt is where the machine was in the last list (a hint).
	listAt int
	// configuredAt is when the machine was first seen Configured while
	// its agent had not registered (RequireRegistration): the
	// registration timeout runs from it.
	configuredAt time.Time
	// createdAt and hash are the machine's creation time and settings
	// hash label, as last listed.
	createdAt time.Time
	hash      string
	// unhealthy says why the joined node is unhealthy, since
	// unhealthySince ("" when healthy).
	unhealthy      string
	unhealthySince time.Time
	// replace is the reason the node is being replaced ("" when it is
	// not); evacuated is set once its restartable work was moved off.
	replace   string
	evacuated bool
	// wait is the last disruption wait reported for the node (its kind
	// and reason), so that each is reported once; waitWhy says it.
	wait, waitWhy string
}

func (n *node) ref(pool string) Node {
	return Node{Pool: pool, ID: n.id, MachineID: n.rec.MachineID, Host: n.host}
}

func (n *node) expired(now time.Time) bool { return !n.deadline.IsZero() && !now.Before(n.deadline) }

// doomed is a machine to delete until the provider answers NotFound, then
// forget.
type doomed struct {
	rec       Record // Intent delete
	persisted bool   // the journal holds the delete intent
	gone      bool   // NotFound seen: only the journal record is left
	done      bool   // record removed; dropped at the end of the pass
	tries     int
}

// ParseMachineID reads the ordinal out of a machine id that the controller
// of pool made ("<pool>-<ordinal>-<serial>"); ok is false for any other id.
// A worker started on a machine is named after it, which is how a node of a
// pressure report is matched to its ordinal.
func ParseMachineID(pool, id string) (ordinal reconcile.NodeID, ok bool) {
	rest, ok := strings.CutPrefix(id, pool+"-")
	if !ok {
		return 0, false
	}
	ord, serial, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	if _, err := strconv.ParseUint(serial, 10, 64); err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(ord)
	if err != nil || n < 0 || strconv.Itoa(n) != ord {
		return 0, false
	}
	return reconcile.NodeID(n), true
}

// machineID names the machine of ordinal id made from serial.
func machineID(pool string, id reconcile.NodeID, serial uint64) string {
	var b strings.Builder
	b.Grow(len(pool) + 24)
	b.WriteString(pool)
	b.WriteByte('-')
	b.WriteString(strconv.Itoa(int(id)))
	b.WriteByte('-')
	b.WriteString(strconv.FormatUint(serial, 10))
	return b.String()
}

func (c *Controller) node(id reconcile.NodeID) *node {
	if id < 0 || int(id) >= len(c.nodes) {
		return nil
	}
	return c.nodes[id]
}

func (c *Controller) track(n *node) {
	for int(n.id) >= len(c.nodes) {
		c.nodes = append(c.nodes, nil)
	}
	c.nodes[n.id] = n
	c.byMachine[n.rec.MachineID] = n
	c.changed(n.id)
}

func (c *Controller) untrack(n *node) {
	if c.node(n.id) == n {
		c.nodes[n.id] = nil
	}
	delete(c.byMachine, n.rec.MachineID)
	c.changed(n.id)
}

// createRequest is the Create of a journaled machine. Its only label is the
// hash of the settings the machine is made with (Config.NodeHash): the id
// already names the pool and the ordinal.
func (c *Controller) createRequest(r *Record) provider.CreateRequest {
	req := provider.CreateRequest{Fence: c.fence(), Pool: c.cfg.Pool, MachineID: r.MachineID, Offering: r.Offering}
	if h := c.cfg.NodeHash[r.Offering]; h != "" {
		req.Labels = map[string]string{HashLabel: h}
	}
	return req
}

// skip makes launches pass over an offering for CapacityBackoff.
func (c *Controller) skip(offering string, now time.Time) time.Time {
	until := now.Add(c.cfg.CapacityBackoff)
	c.skipUntil[offering] = until
	return until
}

func (c *Controller) skipped(offering string, now time.Time) bool {
	until, ok := c.skipUntil[offering]
	return ok && now.Before(until)
}

// nextText names the offering the next launch will try among cands.
func (c *Controller) nextText(cands []capacity.Offering, now time.Time) string {
	for _, o := range cands {
		if !c.skipped(o.Name(), now) {
			return "trying the next-cheapest, " + o.Name()
		}
	}
	return "no other offering that fits is left to try"
}

// candidates returns the offerings a node may be launched from, in the
// order to try them: the launch's offering and its fallbacks when the
// Provision carries a purchase (names the pool does not offer are left
// out), every offering by effective cost otherwise.
func (c *Controller) candidates(l *capacity.Launch) []capacity.Offering {
	if l == nil {
		return c.offerings
	}
	var out []capacity.Offering
	for _, name := range append([]string{l.Offering}, l.Fallback...) {
		if i := slices.IndexFunc(c.offerings, func(o capacity.Offering) bool { return o.Name() == name }); i >= 0 &&
			!slices.ContainsFunc(out, func(o capacity.Offering) bool { return o.Name() == name }) {
			out = append(out, c.offerings[i])
		}
	}
	if len(out) == 0 {
		return c.offerings
	}
	return out
}

// provision carries out a Provision: one machine per ordinal, from the
// offerings its launches name (ordinals past them: the last launch the pool
// had, so that a replacement hosts the work its purchase was for), and one Provisioned (the ordinals launched,
// booting ones and ones whose Create had an unknown outcome included) or
// ProvisionFailed (none) queued for the reconciler.
func (c *Controller) provision(ctx context.Context, ids []reconcile.NodeID, launch []capacity.Launch) {
	ls := make([]*capacity.Launch, len(ids))
	li, used := 0, 0
	for i := range ids {
		for li < len(launch) && used >= launch[li].Count {
			li, used = li+1, 0
		}
		switch {
		case li < len(launch):
			ls[i] = &launch[li]
			used++
			c.lastLaunch = ls[i]
		case len(c.replaceOffers) > 0:
			// The replacement of a node swapped for a cheaper offering.
			ls[i] = &capacity.Launch{Offering: c.replaceOffers[0], Count: 1}
			c.replaceOffers = c.replaceOffers[1:]
		case c.lastLaunch != nil:
			// Beyond the purchase (a replacement of a lost node, a retry):
			// the offering the pool last bought for its work.
			ls[i] = c.lastLaunch
		}
	}
	var got []reconcile.NodeID
	why := "nothing to launch"
	if c.cfg.CreateConcurrency > 1 && len(ids) > 1 {
		got, why = c.launchMany(ctx, ids, ls)
	} else {
		for i, id := range ids {
			ok, stop, reason := c.launch(ctx, id, ls[i])
			if c.deposed {
				return
			}
			if ok {
				got = append(got, id)
			} else {
				why = reason
			}
			if stop {
				break
			}
		}
	}
	if c.deposed {
		return
	}
	if len(got) == 0 {
		c.queue = append(c.queue, reconcile.ProvisionFailed{Err: why})
		return
	}
	c.queue = append(c.queue, reconcile.Provisioned{IDs: got})
}

// launch creates the machine of ordinal id from the first of its candidate
// offerings (see candidates) not being skipped, journaling its record first. It reports whether the node
// now counts as launched, whether the rest of the Provision must stop (a
// total quota, the journal, no offering left) and, when not launched, why.
func (c *Controller) launch(ctx context.Context, id reconcile.NodeID, l *capacity.Launch) (ok, stop bool, why string) {
	if old := c.node(id); old != nil {
		c.emit(TypeWarning, reconcile.NoteIgnored, "node %d: provision while machine %s still serves it: deleting that machine", id, old.rec.MachineID)
		c.retire(ctx, old)
	}
	if c.quotaHit != "" {
		return false, true, c.quotaHit
	}
	now := c.clock.Now()
	cands := c.candidates(l)
	probe := ""
	if !c.probed {
		probe = c.probe(cands, now)
	}
	var passed []string // candidates skipped, out of capacity
	for _, off := range cands {
		name := off.Name()
		if c.skipped(name, now) && name != probe {
			passed = append(passed, name)
			continue
		}
		if probe != "" {
			c.probed = true // one probe per tick
			probe = ""
		}
		serial, err := c.journal.NextSerial(ctx, c.epoch)
		if err != nil {
			c.journalFailed(err, "node %d not launched: %v", id, err)
			return false, true, "journal: " + err.Error()
		}
		rec := Record{MachineID: machineID(c.cfg.Pool, id, serial), Ordinal: id, Offering: name, Serial: serial, Intent: IntentCreate}
		if err := c.journal.Put(ctx, c.epoch, rec); err != nil {
			c.journalFailed(err, "node %d not launched: %v", id, err)
			return false, true, "journal: " + err.Error()
		}
		_, err = c.prov.Create(ctx, c.createRequest(&rec))
		var next bool
		if ok, stop, why, next = c.created(ctx, id, l, rec, off, cands, passed, now, err); !next {
			return ok, stop, why
		}
	}
	if why == "" {
		why = "every offering that fits is being skipped"
	}
	if l != nil {
		// Other nodes of the provision may need other offerings: go on.
		c.emit(TypeWarning, ReasonNoOffering, "node %d not launched: %s and its fallbacks are all being skipped (%s)", id, l.Offering, c.skipList(now))
		return false, false, why
	}
	c.emit(TypeWarning, ReasonNoOffering, "node %d not launched: every offering is being skipped (%s)", id, c.skipList(now))
	return false, true, why
}

// created handles the outcome err of the Create of rec (node id, offering
// off, the first of cands not skipped after passed): the node is launched
// (ok), or the Provision must stop (stop), or next is set when the next
// candidate offering is to be tried (the record is forgotten and why says
// why this one failed).
func (c *Controller) created(ctx context.Context, id reconcile.NodeID, l *capacity.Launch, rec Record, off capacity.Offering,
	cands []capacity.Offering, passed []string, now time.Time, err error) (ok, stop bool, why string, next bool) {
	name := off.Name()
	switch provider.Kind(err) {
	case provider.KindNone:
		delete(c.skipUntil, name) // a probe that succeeded: the offering is back
		c.track(&node{id: id, rec: rec, confirmed: true, deadline: now.Add(c.cfg.LaunchTimeout)})
		c.emit(TypeNormal, ReasonLaunched, "node %d: machine %s launched from %s ($%.4g/h effective)%s", id, rec.MachineID, name,
			off.EffectiveCost(), launchWhy(l, name, passed))
		return true, false, "", false
	case provider.KindStaleFence:
		c.depose(err)
		return false, true, err.Error(), false
	case provider.KindInsufficientCapacity:
		c.forget(ctx, rec)
		until := c.skip(name, now)
		c.emit(TypeWarning, ReasonInsufficientCapacity, "node %d: %v: %s skipped until %s, %s",
			id, err, name, until.UTC().Format(time.RFC3339), c.nextText(cands, now))
		return false, false, err.Error(), true
	case provider.KindQuotaExceeded:
		c.forget(ctx, rec)
		var qe *provider.QuotaExceededError
		if errors.As(err, &qe) && qe.Offering != "" {
			until := c.skip(name, now)
			c.emit(TypeWarning, ReasonQuotaExceeded, "node %d: %v: %s skipped until %s, %s",
				id, err, name, until.UTC().Format(time.RFC3339), c.nextText(cands, now))
			return false, false, err.Error(), true
		}
		c.emit(TypeWarning, ReasonQuotaExceeded, "node %d not launched: %v: no more creates until the next tick", id, err)
		c.quotaHit = err.Error()
		return false, true, err.Error(), false
	case provider.KindInvalid, provider.KindNotFound:
		c.forget(ctx, rec)
		until := c.skip(name, now)
		c.emit(TypeWarning, ReasonOfferingRefused, "node %d: create refused: %v: %s skipped until %s, %s",
			id, err, name, until.UTC().Format(time.RFC3339), c.nextText(cands, now))
		return false, false, err.Error(), true
	case provider.KindConflict:
		// A fresh id the provider knows: not ours (another pool, or
		// retired). Nothing was created for us under it.
		c.forget(ctx, rec)
		c.emit(TypeWarning, ReasonConflict, "node %d not launched: %v", id, err)
		return false, false, err.Error(), false
	default:
		// Transient, canceled or unknown: the Create may have been
		// accepted. The node counts as launching and the same Create
		// (a replay if it was) is made again on the next tick.
		c.track(&node{id: id, rec: rec, tries: 1, deadline: now.Add(c.cfg.LaunchTimeout)})
		c.emit(TypeWarning, ReasonProviderError, "node %d: create machine %s: %v; it counts as launching and the create is replayed on the next tick",
			id, rec.MachineID, err)
		return true, false, "", false
	}
}

// launchWhy says why a machine was launched from offering name: the
// purchase's choice, or a fallback of it past the offerings out of capacity.
func launchWhy(l *capacity.Launch, name string, passed []string) string {
	var b strings.Builder
	switch {
	case l == nil:
		b.WriteString(": the cheapest offering")
	case l.Offering == name:
		b.WriteString(": the purchase's choice")
	default:
		b.WriteString(": fallback for " + l.Offering + ", which hosts the same work")
	}
	if len(passed) > 0 {
		b.WriteString("; skipped " + strings.Join(passed, ", ") + " (out of capacity)")
	}
	return b.String()
}

// probe returns, when every candidate offering is being skipped, the one
// whose skip ends first: it is tried once per tick anyway, so a pool
// recovers within a tick of capacity returning instead of waiting out
// CapacityBackoff. It returns "" when some candidate is not skipped.
func (c *Controller) probe(cands []capacity.Offering, now time.Time) string {
	best := ""
	var bestUntil time.Time
	for _, o := range cands {
		until, ok := c.skipUntil[o.Name()]
		if !ok || !now.Before(until) {
			return ""
		}
		if best == "" || until.Before(bestUntil) {
			best, bestUntil = o.Name(), until
		}
	}
	return best
}

func (c *Controller) skipList(now time.Time) string {
	var parts []string
	for _, o := range c.offerings {
		if until, ok := c.skipUntil[o.Name()]; ok && now.Before(until) {
			parts = append(parts, o.Name()+" until "+until.UTC().Format(time.RFC3339))
		}
	}
	return strings.Join(parts, ", ")
}

// forget removes the record of a machine that was never created. When the
// journal fails, the machine is doomed instead: its Delete ends in NotFound
// and the removal is retried.
func (c *Controller) forget(ctx context.Context, rec Record) {
	if err := c.journal.Remove(ctx, c.epoch, rec.MachineID); err != nil {
		if c.journalFailed(err, "forget machine %s: %v; retried", rec.MachineID, err) {
			c.doom(ctx, rec)
		}
	}
}

// observe compares every tracked machine with this tick's List and dooms
// the pool's machines that no journal knows.
func (c *Controller) observe(ctx context.Context) {
	now := c.clock.Now()
	for i := 0; i < len(c.nodes) && !c.deposed; i++ {
		if n := c.nodes[i]; n != nil {
			c.observeNode(ctx, n, c.listedMachine(n.rec.MachineID, &n.listAt), now, true)
		}
	}
	c.forgetOrphans()
	// The machines of the pool's nodes, found where their hint points,
	// are no orphans: only the others are looked up by id.
	c.claimed = slices.Grow(c.claimed[:0], len(c.list))[:len(c.list)]
	clear(c.claimed)
	for _, n := range c.nodes {
		if n != nil && n.listAt >= 0 && n.listAt < len(c.list) && c.list[n.listAt].ID == n.rec.MachineID {
			c.claimed[n.listAt] = true
		}
	}
	for i := 0; i < len(c.list) && !c.deposed; i++ {
		if m := &c.list[i]; !c.claimed[i] && c.byMachine[m.ID] == nil && c.doomedBy[m.ID] == nil {
			c.orphan(ctx, m)
		}
	}
}

// observeNode turns one observation of n's machine (m; nil when the
// provider does not have it) into reconciler events and provider calls.
// mayCall false forbids Configure (an observation made after a Configure
// conflict).
func (c *Controller) observeNode(ctx context.Context, n *node, m *provider.Machine, now time.Time, mayCall bool) {
	if m == nil {
		if !n.confirmed {
			if mayCall {
				c.replayCreate(ctx, n, now)
			}
			return
		}
		c.lose(ctx, n, ReasonNodeLost, "node %d: machine %s disappeared", n.id, n.rec.MachineID)
		return
	}
	n.confirmed = true
	if n.host != m.Host {
		n.host = m.Host
		c.changed(n.id)
	}
	n.createdAt, n.hash = m.CreatedAt, m.Labels[HashLabel]
	if !m.ReclaimAt.IsZero() {
		notice := "spot interruption notice"
		if m.Reason != "" {
			notice = m.Reason // e.g. a fleet's preemption
		}
		c.lose(ctx, n, ReasonInterrupted, "node %d: machine %s is reclaimed at %s (%s): replacing it",
			n.id, m.ID, m.ReclaimAt.UTC().Format(time.RFC3339), notice)
		return
	}
	switch m.State {
	case provider.Failed:
		c.lose(ctx, n, ReasonNodeLost, "node %d: machine %s failed: %s", n.id, m.ID, m.Reason)
	case provider.Deleting:
		c.lose(ctx, n, ReasonNodeLost, "node %d: machine %s is being deleted by someone else", n.id, m.ID)
	case provider.Configured:
		n.tries = 0
		if n.drain == drainUnbinding {
			c.checkUnbinding(n, m, now)
			return
		}
		n.deadline = time.Time{}
		if !n.joined && c.mustRegister() {
			if info, ok := c.info[n.rec.MachineID]; !c.infoOK || !ok || !info.Registered || info.Unhealthy != "" {
				if n.configuredAt.IsZero() {
					n.configuredAt = now
				}
				if !now.Before(n.configuredAt.Add(c.cfg.RegistrationTimeout)) {
					c.timedOut(ctx, n, ReasonRegistrationTimeout, now,
						"node %d: machine %s (%s) runs, but its agent did not register within the registration timeout of %s: replacing it",
						n.id, m.ID, n.rec.Offering, c.cfg.RegistrationTimeout)
				}
				return
			}
		}
		if !n.joined {
			delete(c.timeouts, n.rec.Offering)
			n.joined = true
			c.changed(n.id)
			c.queue = append(c.queue, reconcile.NodeJoined{ID: n.id})
			c.emit(TypeNormal, ReasonJoined, "node %d: machine %s (%s, %s) joined", n.id, m.ID, m.Offering, m.Host)
		}
	case provider.Idle:
		switch {
		case n.drain == drainDone:
		case n.drain != drainNone:
			// Out of its cluster, so empty: the drain is complete.
			c.drained(n, "left its cluster")
		case n.expired(now):
			c.timedOut(ctx, n, ReasonLaunchTimeout, now, "node %d: machine %s (%s) is still idle after the launch timeout of %s: replacing it",
				n.id, m.ID, n.rec.Offering, c.cfg.LaunchTimeout)
		case mayCall:
			c.configure(ctx, n, now)
		}
	case provider.Draining:
		switch {
		case n.drain == drainUnbinding:
			c.checkUnbinding(n, m, now)
		case n.drain != drainNone:
		case n.expired(now):
			c.lose(ctx, n, ReasonLaunchTimeout, "node %d: machine %s is still leaving its cluster after %s: replacing it",
				n.id, m.ID, c.cfg.LaunchTimeout)
		case n.deadline.IsZero():
			// Unbound by someone else; it is configured again once Idle.
			n.deadline = now.Add(c.cfg.LaunchTimeout)
		}
	default: // Speculative, Creating, Configuring
		if n.expired(now) && n.drain == drainNone {
			c.timedOut(ctx, n, ReasonLaunchTimeout, now, "node %d: machine %s (%s) is still %s after the launch timeout of %s: replacing it",
				n.id, m.ID, n.rec.Offering, m.State, c.cfg.LaunchTimeout)
		}
	}
}

// checkUnbinding completes a drain whose machine has not left its cluster
// within the launch timeout: Delete takes it from there.
func (c *Controller) checkUnbinding(n *node, m *provider.Machine, now time.Time) {
	if n.expired(now) {
		c.drained(n, "is still "+string(m.State)+" after "+c.cfg.LaunchTimeout.String()+"; it is deleted anyway")
	}
}

// replayCreate makes an unconfirmed Create again: a replay if the first one
// was accepted, the creation otherwise.
func (c *Controller) replayCreate(ctx context.Context, n *node, now time.Time) {
	if n.tries > c.cfg.MaxRetries || n.expired(now) {
		c.lose(ctx, n, ReasonGaveUp, "node %d: create of machine %s not confirmed after %d attempts: replacing it", n.id, n.rec.MachineID, n.tries)
		return
	}
	_, err := c.prov.Create(ctx, c.createRequest(&n.rec))
	switch kind := provider.Kind(err); kind {
	case provider.KindNone:
		n.confirmed, n.tries = true, 0
		c.emit(TypeNormal, ReasonLaunched, "node %d: machine %s launched (create replayed)", n.id, n.rec.MachineID)
	case provider.KindStaleFence:
		c.depose(err)
	case provider.KindInsufficientCapacity, provider.KindQuotaExceeded, provider.KindInvalid:
		// Definitely not created: forget it and let the reconciler
		// launch the node again, from another offering if this one is out.
		var qe *provider.QuotaExceededError
		if kind != provider.KindQuotaExceeded || errors.As(err, &qe) && qe.Offering != "" {
			c.skip(n.rec.Offering, now)
		}
		c.untrack(n)
		c.forget(ctx, n.rec)
		c.queue = append(c.queue, reconcile.NodeLost{ID: n.id})
		c.emit(TypeWarning, reasonOfKind(kind), "node %d: create machine %s: %v: launching the node again", n.id, n.rec.MachineID, err)
	case provider.KindConflict:
		c.lose(ctx, n, ReasonConflict, "node %d: create machine %s: %v: launching the node again", n.id, n.rec.MachineID, err)
	default:
		n.tries++
		c.emit(TypeWarning, ReasonProviderError, "node %d: create machine %s: %v; replayed on the next tick (attempt %d of %d)",
			n.id, n.rec.MachineID, err, n.tries, c.cfg.MaxRetries+1)
	}
}

func reasonOfKind(kind string) string {
	switch kind {
	case provider.KindInsufficientCapacity:
		return ReasonInsufficientCapacity
	case provider.KindQuotaExceeded:
		return ReasonQuotaExceeded
	case provider.KindInvalid:
		return ReasonOfferingRefused
	case provider.KindConflict:
		return ReasonConflict
	}
	return ReasonProviderError
}

// configure hands an Idle machine the bootstrap blob.
func (c *Controller) configure(ctx context.Context, n *node, now time.Time) {
	if n.deadline.IsZero() {
		n.deadline = now.Add(c.cfg.LaunchTimeout) // a joined node rejoining
	}
	ack, err := c.prov.Configure(ctx, provider.ConfigureRequest{Fence: c.fence(), Pool: c.cfg.Pool,
		MachineID: n.rec.MachineID, Cluster: c.cfg.Cluster, Bootstrap: c.cfg.Bootstrap})
	switch provider.Kind(err) {
	case provider.KindNone:
		n.tries = 0
		if !ack.Replayed {
			c.emit(TypeNormal, ReasonConfiguring, "node %d: machine %s is joining cluster %q", n.id, n.rec.MachineID, c.cfg.Cluster)
		}
	case provider.KindStaleFence:
		c.depose(err)
	case provider.KindNotFound:
		c.lose(ctx, n, ReasonNodeLost, "node %d: configure machine %s: %v", n.id, n.rec.MachineID, err)
	case provider.KindConflict:
		c.emit(TypeWarning, ReasonConflict, "node %d: configure machine %s: %v; re-reading it", n.id, n.rec.MachineID, err)
		m, gerr := c.prov.Get(ctx, n.rec.MachineID)
		switch {
		case gerr == nil && m.Pool == c.cfg.Pool:
			c.observeNode(ctx, n, &m, now, false)
		case gerr == nil || provider.IsNotFound(gerr):
			c.observeNode(ctx, n, nil, now, false)
		default:
			c.emit(TypeWarning, ReasonProviderError, "node %d: get machine %s: %v; re-read on the next tick", n.id, n.rec.MachineID, gerr)
		}
	default:
		n.tries++
		if n.tries > c.cfg.MaxRetries {
			c.lose(ctx, n, ReasonGaveUp, "node %d: configure machine %s failed %d times, last: %v: replacing it", n.id, n.rec.MachineID, n.tries, err)
			return
		}
		c.emit(TypeWarning, ReasonProviderError, "node %d: configure machine %s: %v; retried on the next tick (attempt %d of %d)",
			n.id, n.rec.MachineID, err, n.tries, c.cfg.MaxRetries+1)
	}
}

// lose reports n lost to the reconciler and deletes its machine. The
// reconciler's Terminate that follows finds the ordinal already free.
func (c *Controller) lose(ctx context.Context, n *node, reason, format string, args ...any) {
	c.emit(TypeWarning, reason, format, args...)
	c.queue = append(c.queue, reconcile.NodeLost{ID: n.id})
	c.retire(ctx, n)
}

// retire frees n's ordinal and deletes its machine until NotFound; a
// Workload that is a Forgetter drops the node at once, joined or not: its
// worker may have registered before this controller saw it join.
func (c *Controller) retire(ctx context.Context, n *node) {
	if f, ok := c.work.(Forgetter); ok {
		if err := f.Forget(ctx, n.ref(c.cfg.Pool)); err != nil {
			c.emit(TypeWarning, ReasonWorkloadError, "node %d: forgetting machine %s: %v", n.id, n.rec.MachineID, err)
		}
	}
	c.untrack(n)
	c.deleteOne(ctx, c.doom(ctx, n.rec))
}

// terminate carries out a Terminate.
func (c *Controller) terminate(ctx context.Context, id reconcile.NodeID) {
	if n := c.node(id); n != nil {
		c.retire(ctx, n)
	}
}

// doom journals the delete intent of a machine and queues it for deletion.
func (c *Controller) doom(ctx context.Context, rec Record) *doomed {
	if d := c.doomedBy[rec.MachineID]; d != nil {
		return d
	}
	rec.Intent = IntentDelete
	d := &doomed{rec: rec}
	c.persist(ctx, d)
	c.doomed = append(c.doomed, d)
	c.doomedBy[rec.MachineID] = d
	return d
}

func (c *Controller) persist(ctx context.Context, d *doomed) {
	if err := c.journal.Put(ctx, c.epoch, d.rec); err != nil {
		c.journalFailed(err, "record delete intent of machine %s: %v; retried", d.rec.MachineID, err)
		return
	}
	d.persisted = true
}

// orphan dooms a machine of the pool that no journal knows, once
// OrphanGrace has passed since it was first seen.
func (c *Controller) orphan(ctx context.Context, m *provider.Machine) {
	now := c.clock.Now()
	seen, ok := c.orphanSeen[m.ID]
	if !ok {
		seen = now
		c.orphanSeen[m.ID] = now
		if c.cfg.OrphanGrace > 0 && !c.deposed {
			c.emit(TypeWarning, ReasonOrphanSeen, "machine %s (%s, %s) is in the pool but in no journal: deleting it at %s unless it is claimed",
				m.ID, m.Offering, m.State, now.Add(c.cfg.OrphanGrace).UTC().Format(time.RFC3339))
		}
	}
	if now.Sub(seen) < c.cfg.OrphanGrace {
		return
	}
	delete(c.orphanSeen, m.ID)
	c.doom(ctx, Record{MachineID: m.ID, Ordinal: -1, Offering: m.Offering, Intent: IntentDelete})
	if !c.deposed {
		c.emit(TypeWarning, ReasonOrphan, "machine %s (%s, %s) is in the pool but in no journal (seen %s ago): deleting it", m.ID, m.Offering, m.State, now.Sub(seen))
	}
}

// forgetOrphans drops the first sightings of machines no longer listed or
// now known.
func (c *Controller) forgetOrphans() {
	for id := range c.orphanSeen {
		if c.listedMachine(id, nil) == nil || c.byMachine[id] != nil || c.doomedBy[id] != nil {
			delete(c.orphanSeen, id)
		}
	}
}

// sweep calls Delete for every doomed machine, except those this tick's
// List shows already Deleting.
func (c *Controller) sweep(ctx context.Context, listed bool) {
	for i := 0; i < len(c.doomed) && !c.deposed; i++ {
		d := c.doomed[i]
		if d.done {
			continue
		}
		if m := c.listedMachine(d.rec.MachineID, nil); listed && m != nil && m.State == provider.Deleting {
			continue
		}
		c.deleteOne(ctx, d)
	}
}

// deleteOne makes one Delete of a doomed machine; NotFound ends it.
func (c *Controller) deleteOne(ctx context.Context, d *doomed) {
	if !d.persisted {
		c.persist(ctx, d)
	}
	if c.deposed {
		return
	}
	if !d.gone {
		_, err := c.prov.Delete(ctx, provider.DeleteRequest{Fence: c.fence(), Pool: c.cfg.Pool, MachineID: d.rec.MachineID})
		switch provider.Kind(err) {
		case provider.KindNone:
			d.tries = 0
			return
		case provider.KindNotFound:
			d.gone = true
			c.deleted(ctx, d.rec)
		case provider.KindStaleFence:
			c.depose(err)
			return
		default:
			d.tries++
			c.emit(TypeWarning, ReasonProviderError, "delete machine %s: %v; retried on the next tick (attempt %d)", d.rec.MachineID, err, d.tries)
			return
		}
	}
	if err := c.journal.Remove(ctx, c.epoch, d.rec.MachineID); err != nil {
		c.journalFailed(err, "forget deleted machine %s: %v; retried", d.rec.MachineID, err)
		return
	}
	d.done = true
	delete(c.doomedBy, d.rec.MachineID)
	if d.rec.Ordinal >= 0 {
		c.emit(TypeNormal, ReasonDeleted, "machine %s of node %d deleted", d.rec.MachineID, d.rec.Ordinal)
	} else {
		c.emit(TypeNormal, ReasonDeleted, "machine %s deleted", d.rec.MachineID)
	}
}

// deleted tells a Workload that is a DeletionObserver that rec's machine
// is confirmed deleted (its Delete answered NotFound).
func (c *Controller) deleted(ctx context.Context, rec Record) {
	o, ok := c.work.(DeletionObserver)
	if !ok {
		return
	}
	n := Node{Pool: c.cfg.Pool, ID: rec.Ordinal, MachineID: rec.MachineID}
	if err := o.MachineDeleted(ctx, n); err != nil {
		c.emit(TypeWarning, ReasonWorkloadError, "machine %s deleted, but telling the workload failed: %v", rec.MachineID, err)
	}
}

// startDrain carries out a Drain: stop dispatch, and unbind the machine at
// once if the node is already empty.
func (c *Controller) startDrain(ctx context.Context, id reconcile.NodeID) {
	n := c.node(id)
	if n == nil {
		c.emit(TypeWarning, reconcile.NoteIgnored, "drain of node %d, which no machine serves: reported complete", id)
		c.queue = append(c.queue, reconcile.DrainComplete{ID: id})
		return
	}
	if n.replace == ReasonRepair {
		// Its replacement is in: the unhealthy node goes as a lost one
		// does, its work handled as a lost worker's (requeued by its
		// restart policy), without waiting on an agent that does not answer.
		c.lose(ctx, n, ReasonRepair, "node %d: machine %s repaired: its replacement joined; it is deleted and its work handled as a lost worker's (%s)",
			n.id, n.rec.MachineID, n.unhealthy)
		return
	}
	n.drain = drainCordoning
	c.changed(n.id)
	n.uncordonOwed = false
	c.advanceDrain(ctx, n)
}

// advanceDrains retries owed Uncordons and moves every drain that waits on
// the workload forward.
func (c *Controller) advanceDrains(ctx context.Context) {
	for i := 0; i < len(c.nodes) && !c.deposed; i++ {
		n := c.nodes[i]
		if n == nil {
			continue
		}
		if n.uncordonOwed {
			c.uncordon(ctx, n)
		}
		if n.drain == drainCordoning || n.drain == drainWaiting {
			c.advanceDrain(ctx, n)
		}
	}
}

// advanceDrain cordons n, and once the workload reports it empty asks the
// provider to unbind its machine.
func (c *Controller) advanceDrain(ctx context.Context, n *node) {
	ref := n.ref(c.cfg.Pool)
	if n.drain == drainCordoning {
		if err := c.work.Cordon(ctx, ref); err != nil {
			c.emit(TypeWarning, ReasonWorkloadError, "node %d: cordon: %v; retried on the next tick", n.id, err)
			return
		}
		n.drain = drainWaiting
		c.changed(n.id)
	}
	if n.replace != "" && !n.evacuated {
		if ev, ok := c.work.(Evacuator); ok {
			if err := ev.Evacuate(ctx, ref); err != nil {
				c.emit(TypeWarning, ReasonWorkloadError, "node %d: move its restartable work off: %v; retried on the next tick", n.id, err)
				return
			}
		}
		n.evacuated = true
	}
	busy, err := c.work.Busy(ctx, ref)
	if err != nil {
		c.emit(TypeWarning, ReasonWorkloadError, "node %d: busy: %v; asked again on the next tick", n.id, err)
		return
	}
	if busy {
		if n.replace != "" && n.wait != "drain-busy" {
			n.wait = "drain-busy"
			c.emit(TypeNormal, ReasonDisruptionWait, "node %d: machine %s is replaced (%s); its drain waits for the work that may not move to end",
				n.id, n.rec.MachineID, n.replace)
		}
		return
	}
	ack, err := c.prov.Drain(ctx, provider.DrainRequest{Fence: c.fence(), Pool: c.cfg.Pool, MachineID: n.rec.MachineID})
	switch provider.Kind(err) {
	case provider.KindNone:
		switch ack.State {
		case provider.Idle, provider.Creating, provider.Speculative:
			c.drained(n, "has no cluster binding")
		default:
			n.drain = drainUnbinding
			c.changed(n.id)
			n.deadline = c.clock.Now().Add(c.cfg.LaunchTimeout)
		}
	case provider.KindStaleFence:
		c.depose(err)
	case provider.KindNotFound:
		c.lose(ctx, n, ReasonNodeLost, "node %d: drain machine %s: %v", n.id, n.rec.MachineID, err)
	case provider.KindConflict:
		c.drained(n, "cannot be unbound ("+err.Error()+"); it is deleted anyway")
	default:
		c.emit(TypeWarning, ReasonProviderError, "node %d: drain machine %s: %v; retried on the next tick", n.id, n.rec.MachineID, err)
	}
}

// drained reports a drain complete.
func (c *Controller) drained(n *node, how string) {
	n.drain = drainDone
	c.changed(n.id)
	n.deadline = time.Time{}
	c.queue = append(c.queue, reconcile.DrainComplete{ID: n.id})
	c.emit(TypeNormal, ReasonDrained, "node %d: machine %s %s: drain complete", n.id, n.rec.MachineID, how)
}

// abortDrain carries out an AbortDrain: dispatch resumes; a machine already
// unbound is configured again once Idle.
func (c *Controller) abortDrain(ctx context.Context, id reconcile.NodeID) {
	n := c.node(id)
	if n == nil {
		return
	}
	n.drain = drainNone
	c.changed(n.id)
	n.deadline = time.Time{}
	c.uncordon(ctx, n)
}

func (c *Controller) uncordon(ctx context.Context, n *node) {
	if err := c.work.Uncordon(ctx, n.ref(c.cfg.Pool)); err != nil {
		n.uncordonOwed = true
		c.emit(TypeWarning, ReasonWorkloadError, "node %d: uncordon: %v; retried on the next tick", n.id, err)
		return
	}
	n.uncordonOwed = false
}
