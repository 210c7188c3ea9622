package shardctl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
)

// preemptDeadline bounds how long a preemption's victims may take to come
// out; past it the donor gives up what it has.
const preemptDeadline = 30 * time.Minute

// pendingCommit is a directive step the shard has taken in memory and must
// record in etcd before it goes on (retried each cycle).
type pendingCommit struct {
	d      etcdstate.Directive
	quota  []etcdstate.QuotaEntry
	doom   map[string]etcdstate.MachineRecord // records to mark doomed first
	marked bool
	held   []doomed // machines to delete once recorded
	run    *preemptRun
}

// preemptRun collects a preemption's victims as they come out of Decide.
type preemptRun struct {
	d       etcdstate.Directive
	since   time.Time // when the drains started, on the shard's clock
	profile fleet.ProfileID
	out     []etcdstate.Exported
	doom    map[string]etcdstate.MachineRecord
	held    []doomed
}

// directives reads the coordinator's directives and takes the steps that
// are this shard's: as donor of a pending one, of a draining one whose
// victims are out, and as recipient of an exported one. One step is
// recorded at a time, in id order.
func (c *Controller) directives(ctx context.Context, now time.Time) {
	if c.lost {
		return
	}
	if c.pending != nil {
		if !c.commit(ctx) {
			return
		}
	}
	coord, err := c.store.LoadCoord(ctx)
	if err != nil {
		c.pause("etcd unreachable: " + err.Error())
		c.fail(fmt.Errorf("directives: %w", err))
		return
	}
	c.wanted = c.wanted[:0]
	for _, name := range coord.Wanted {
		if p, ok := c.cat.Profile(name); ok {
			c.wanted = append(c.wanted, p)
		}
	}
	me := uint16(c.cfg.Shard)
	present := map[string]bool{}
	var mine []etcdstate.Directive
	for _, d := range coord.Directives {
		present[d.ID] = true
		if !c.known[d.ID] {
			c.known[d.ID] = true
			if d.ID < c.seenMax {
				c.refused++
				c.refusedIDs()[d.ID] = true
				c.log.Error("refusing a directive older than one already seen: a deposed coordinator wrote it",
					"directive", d.ID, "newest", c.seenMax)
				continue
			}
			c.seenMax = d.ID
		}
		if c.refusedIDs()[d.ID] {
			continue
		}
		if d.From == me || d.To == me {
			mine = append(mine, d)
		}
	}
	for id := range c.known {
		if !present[id] {
			delete(c.known, id)
			delete(c.refusedIDs(), id)
		}
	}
	c.inFlight = mine
	for _, d := range mine {
		switch {
		case d.From == me && d.State == etcdstate.StatePending:
			c.donate(ctx, now, d)
		case d.From == me && d.State == etcdstate.StateDraining:
			c.drained(ctx, now, d)
		case d.To == me && d.State == etcdstate.StateExported:
			c.receive(ctx, now, d)
		}
		if c.pending != nil || c.deposed {
			return
		}
	}
}

func (c *Controller) refusedIDs() map[string]bool {
	if c.refusedSet == nil {
		c.refusedSet = map[string]bool{}
	}
	return c.refusedSet
}

// donate takes a pending directive's donor step.
func (c *Controller) donate(ctx context.Context, now time.Time, d etcdstate.Directive) {
	p, ok := c.cat.Profile(d.Profile)
	var acts []fleet.Action
	var err error
	switch {
	case !ok:
		err = fmt.Errorf("profile: unknown profile %q", d.Profile)
	case d.Kind == fleet.ReassignIdle.String():
		acts, err = c.shard.Export(p, fleet.Idle, clampCount(d.Count))
	case d.Kind == fleet.ReassignQuota.String():
		acts, err = c.shard.Export(p, fleet.Speculative, clampCount(d.Count))
	case d.Kind == fleet.Preempt.String():
		drains, perr := c.shard.Preempt(now, fleet.PreemptRequest{Profile: p, Priority: d.Priority, MinGap: d.MinGap,
			Count: clampCount(d.Count)})
		if perr != nil {
			c.log.Warn("preemption refused by the engine", "directive", d.ID, "err", perr)
		}
		c.act(ctx, now, drains)
		d.Victims = uint32(len(drains))
		d.State = etcdstate.StateDraining
		if len(drains) == 0 {
			d.State = etcdstate.StateExported
		}
		c.pending = &pendingCommit{d: d}
		if len(drains) > 0 {
			c.pending.run = &preemptRun{d: d, profile: p, since: now, doom: map[string]etcdstate.MachineRecord{}}
		}
		c.commit(ctx)
		return
	default:
		err = fmt.Errorf("kind: unknown directive kind %q", d.Kind)
	}
	if err != nil {
		c.log.Warn("directive cannot be carried out; giving up nothing", "directive", d.ID, "err", err)
	}
	run := &preemptRun{d: d, doom: map[string]etcdstate.MachineRecord{}}
	for _, a := range acts {
		c.take(run, a)
	}
	c.finish(ctx, run)
}

// take moves an exported machine out of the controller's books into run.
func (c *Controller) take(run *preemptRun, a fleet.Action) {
	spec, _ := c.cat.OfferingSpec(a.Exported.Offering)
	e := etcdstate.Exported{Provider: spec.Provider, Offering: spec.Offering.Name(),
		ReclamationPenalty: a.Exported.ReclamationPenalty, WasIdle: a.Exported.State == fleet.Idle}
	run.out = append(run.out, e)
	m := c.slot(a.Machine)
	if m.id != "" {
		run.doom[m.id] = etcdstate.MachineRecord{Provider: e.Provider, Offering: e.Offering,
			ReclamationPenalty: e.ReclamationPenalty, DoomedBy: run.d.ID}
		run.held = append(run.held, doomed{prov: m.prov, id: m.id, record: true})
		c.held[m.id] = true
		delete(c.byID, m.id)
	}
	*c.slot(a.Machine) = mach{}
}

// finish records the donor's step: what it gave up and its reduced quota.
func (c *Controller) finish(ctx context.Context, run *preemptRun) {
	d := run.d
	d.State = etcdstate.StateExported
	d.Exported = run.out
	quota := slices.Clone(c.quota)
	for _, e := range run.out {
		for i := range quota {
			if quota[i].Provider == e.Provider && quota[i].Offering == e.Offering && quota[i].Count > 0 {
				quota[i].Count--
				break
			}
		}
	}
	c.pending = &pendingCommit{d: d, quota: quota, doom: run.doom, held: run.held}
	c.commit(ctx)
}

// exported handles a preemption victim leaving the shard (ActExport from
// Decide): it joins the oldest run of its profile that still waits for it.
func (c *Controller) exported(a fleet.Action) {
	p := c.cat.OfferingProfile(a.Exported.Offering)
	for _, id := range slices.Sorted(maps.Keys(c.preempts)) {
		run := c.preempts[id]
		if run.profile == p && uint32(len(run.out)) < run.d.Victims {
			c.take(run, a)
			return
		}
	}
	// No run waits for it (the run was given up): the machine has left the
	// shard all the same; delete it, its slot returns with the next rebuild.
	orphan := &preemptRun{doom: map[string]etcdstate.MachineRecord{}}
	c.take(orphan, a)
	for _, h := range orphan.held {
		delete(c.held, h.id)
		c.doomed[h.id] = h
	}
	c.log.Warn("a machine drained for a directive no longer awaited; deleting it", "machine", a.Machine)
}

// drained finishes a preemption whose victims are all out, or whose
// deadline passed, or which this controller did not start (a restart: its
// drained victims are Idle machines now, exported as such).
func (c *Controller) drained(ctx context.Context, now time.Time, d etcdstate.Directive) {
	run := c.preempts[d.ID]
	if run == nil {
		p, ok := c.cat.Profile(d.Profile)
		run = &preemptRun{d: d, doom: map[string]etcdstate.MachineRecord{}}
		if ok {
			acts, _ := c.shard.Export(p, fleet.Idle, clampCount(d.Victims))
			for _, a := range acts {
				c.take(run, a)
			}
		}
	} else if uint32(len(run.out)) < d.Victims && now.Sub(run.since) < preemptDeadline {
		return
	}
	delete(c.preempts, d.ID)
	run.d = d // the revision read now
	c.finish(ctx, run)
}

// receive takes an exported directive's recipient step: record it done with
// the raised quota, then import the slots.
func (c *Controller) receive(ctx context.Context, now time.Time, d etcdstate.Directive) {
	quota := slices.Clone(c.quota)
	for _, e := range d.Exported {
		i := slices.IndexFunc(quota, func(q etcdstate.QuotaEntry) bool {
			return q.Provider == e.Provider && q.Offering == e.Offering
		})
		if i < 0 {
			quota = append(quota, etcdstate.QuotaEntry{Provider: e.Provider, Offering: e.Offering,
				ReclamationPenalty: e.ReclamationPenalty})
			i = len(quota) - 1
		}
		quota[i].Count++
	}
	done := d
	done.State = etcdstate.StateDone
	if _, err := c.store.AdvanceDirective(ctx, uint16(c.cfg.Shard), c.epoch, done, quota); err != nil {
		c.etcdFailed("directive "+d.ID, err)
		return
	}
	c.quota = quota
	specs := make([]fleet.Exported, 0, len(d.Exported))
	provs := make([]string, 0, len(d.Exported))
	for _, e := range d.Exported {
		off, ok := c.cat.Offering(e.Provider, e.Offering)
		if !ok {
			c.log.Warn("imported slot of an offering not in the catalog", "offering", e.Offering)
			continue
		}
		specs = append(specs, fleet.Exported{Offering: off, ReclamationPenalty: e.ReclamationPenalty,
			State: fleet.Speculative})
		provs = append(provs, e.Provider)
	}
	ids, err := c.shard.Import(now, specs)
	if err != nil {
		c.fail(fmt.Errorf("directive %s: import: %w", d.ID, err))
		return
	}
	for i, id := range ids {
		*c.slot(id) = mach{prov: provs[i]}
	}
	c.log.Info("directive received", "directive", d.ID, "kind", d.Kind, "slots", len(ids))
}

// commit records the pending step; it reports whether nothing is pending
// any more.
func (c *Controller) commit(ctx context.Context) bool {
	pc := c.pending
	me := uint16(c.cfg.Shard)
	if len(pc.doom) > 0 && !pc.marked {
		if err := c.store.PutMachines(ctx, me, c.epoch, pc.doom); err != nil {
			c.etcdFailed("machine records", err)
			return false
		}
		pc.marked = true
	}
	rev, err := c.store.AdvanceDirective(ctx, me, c.epoch, pc.d, pc.quota)
	if err != nil {
		c.etcdFailed("directive "+pc.d.ID, err)
		return false
	}
	if pc.quota != nil {
		c.quota = pc.quota
	}
	for _, h := range pc.held {
		delete(c.held, h.id)
		c.doomed[h.id] = h
	}
	if pc.run != nil {
		pc.run.d = pc.d
		pc.run.d.ModRevision = rev
		c.preempts[pc.d.ID] = pc.run
	}
	c.log.Info("directive step recorded", "directive", pc.d.ID, "state", pc.d.State, "moved", len(pc.d.Exported))
	c.pending = nil
	return true
}
