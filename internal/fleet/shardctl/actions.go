package shardctl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/sdk/provider"
)

// slot returns the controller's side of a shard slot, growing the table.
func (c *Controller) slot(m fleet.MachineID) *mach {
	for int(m) >= len(c.machs) {
		c.machs = append(c.machs, mach{})
	}
	return &c.machs[m]
}

// forget drops a machine's provider id: its slot is Speculative again (or
// left the shard).
func (c *Controller) forget(m fleet.MachineID) {
	s := c.slot(m)
	if s.id != "" {
		delete(c.byID, s.id)
	}
	prov := s.prov
	*s = mach{prov: prov}
}

func (c *Controller) clusterName(id fleet.ClusterID) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[id]
}

func (c *Controller) clusterID(name string) (fleet.ClusterID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.clusters[name]
	return id, ok
}

// observe lists the pool at every provider and folds what changed into the
// shard. A machine with a call not yet accepted keeps the shard's view
// unless the provider shows the call's effect already (a lost
// acknowledgement). Machines gone from the pool return to Speculative;
// machines in the pool the shard does not know are doomed.
func (c *Controller) observe(ctx context.Context, now time.Time) {
	listed := map[string]*provider.Machine{}
	listedBy := map[string]string{}
	ok := map[string]bool{}
	for _, pn := range slices.Sorted(maps.Keys(c.provs)) {
		ms, err := c.provs[pn].List(ctx, provider.Filter{Pool: c.cfg.Pool})
		if err != nil {
			c.fail(fmt.Errorf("provider %s: list: %w", pn, err))
			continue
		}
		ok[pn] = true
		for i := range ms {
			listed[ms[i].ID] = &ms[i]
			listedBy[ms[i].ID] = pn
		}
	}
	var obs []fleet.Observation
	var gone []fleet.MachineID
	for _, id := range slices.Sorted(maps.Keys(c.byID)) {
		slot := c.byID[id]
		m := c.slot(slot)
		if !ok[m.prov] {
			continue
		}
		info, _ := c.shard.Machine(slot)
		pm := listed[id]
		delete(listed, id)
		if m.op != opNone && !m.issued {
			if pm == nil || !shows(m.op, pm) {
				continue // the call is still to be made
			}
			m.issued = true // the call took effect although we missed its answer
		}
		if pm == nil {
			gone = append(gone, slot)
			continue
		}
		if err := pm.Check(); err != nil {
			c.log.Warn("ignoring a bad machine description", "machine", id, "err", err)
			continue
		}
		o := fleet.Observation{Machine: slot, State: toState(pm.State), Host: pm.Host != ""}
		if pm.Cluster != "" {
			cid, known := c.clusterID(pm.Cluster)
			if !known {
				continue
			}
			o.Cluster = cid
		}
		if o.State == fleet.Creating {
			o.Host, o.Cluster = false, 0
		}
		if o.State == fleet.Idle || o.State == fleet.Deleting || o.State == fleet.Failed {
			o.Cluster = 0
		}
		if m.op != opNone && m.issued && m.op != opDelete {
			m.op, m.tries = opNone, 0 // the provider has taken over the transition
		}
		if o.State == info.State && o.Host == info.Host && o.Cluster == info.Cluster {
			continue
		}
		obs = append(obs, o)
	}
	for _, slot := range gone {
		c.unrecord = append(c.unrecord, c.slot(slot).id)
		c.forget(slot)
		obs = append(obs, fleet.Observation{Machine: slot, State: fleet.Speculative})
	}
	c.apply(now, obs)
	for _, id := range slices.Sorted(maps.Keys(listed)) {
		if _, isDoomed := c.doomed[id]; isDoomed || c.held[id] {
			continue
		}
		c.log.Warn("deleting a machine of the pool the shard does not know", "machine", id)
		c.doomed[id] = doomed{prov: listedBy[id], id: id}
	}
}

// shows reports whether the provider's view of a machine shows the effect of
// an operation whose answer was lost.
func shows(op opKind, pm *provider.Machine) bool {
	switch op {
	case opCreate:
		return true
	case opConfigure:
		return pm.State == provider.Configuring || pm.State == provider.Configured
	case opDrain:
		return pm.State == provider.Draining || pm.State == provider.Idle
	case opDelete:
		return pm.State == provider.Deleting
	}
	return false
}

// apply observes into the shard; if the batch is refused, one at a time.
func (c *Controller) apply(now time.Time, obs []fleet.Observation) {
	if len(obs) == 0 {
		return
	}
	if err := c.shard.Observe(now, obs...); err == nil {
		return
	}
	for _, o := range obs {
		if err := c.shard.Observe(now, o); err != nil {
			c.log.Warn("observation refused", "machine", o.Machine, "err", err)
		}
	}
}

// retry makes the calls still due: Creates and Configures that failed
// transiently, Drains whose grace has passed, Deletes until NotFound (of
// shard machines and of doomed ones), and removes stale machine records.
func (c *Controller) retry(ctx context.Context, now time.Time) {
	for _, id := range slices.Sorted(maps.Keys(c.byID)) {
		slot := c.byID[id]
		m := c.slot(slot)
		if m.op == opNone || m.issued && m.op != opDelete {
			continue
		}
		switch m.op {
		case opCreate:
			c.create(ctx, slot)
		case opConfigure:
			c.configure(ctx, now, slot)
		case opDrain:
			if !now.Before(m.due) {
				c.drain(ctx, now, slot)
			}
		case opDelete:
			c.release(ctx, now, slot)
		}
		if c.deposed {
			return
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.doomed)) {
		d := c.doomed[id]
		_, err := c.provs[d.prov].Delete(ctx, provider.DeleteRequest{Fence: c.fence(), Pool: c.cfg.Pool, MachineID: d.id})
		switch {
		case err == nil:
		case provider.IsNotFound(err):
			delete(c.doomed, id)
			if d.record {
				c.unrecord = append(c.unrecord, id)
			}
		case provider.IsStaleFence(err):
			c.fail(fmt.Errorf("%w: %w", ErrDeposed, err))
			return
		default:
			c.fail(fmt.Errorf("delete doomed machine %s: %w", id, err))
		}
	}
	if len(c.unrecord) > 0 && !c.lost {
		if err := c.store.DeleteMachines(ctx, uint16(c.cfg.Shard), c.epoch, c.unrecord); err != nil {
			c.etcdFailed("machine records", err)
		} else {
			c.unrecord = c.unrecord[:0]
		}
	}
}

// etcdFailed handles a failed etcd write: a failed guard deposes, anything
// else pauses provisioning until etcd answers.
func (c *Controller) etcdFailed(what string, err error) {
	if errors.Is(err, etcdstate.ErrFenced) {
		c.fail(fmt.Errorf("%w: %s: %w", ErrDeposed, what, err))
		return
	}
	c.pause("etcd unreachable: " + err.Error())
	c.fail(fmt.Errorf("%s: %w", what, err))
}

// act carries out one cycle's actions.
func (c *Controller) act(ctx context.Context, now time.Time, acts []fleet.Action) {
	var creates []fleet.MachineID
	for _, a := range acts {
		switch a.Kind {
		case fleet.ActCreate:
			creates = append(creates, a.Machine)
		case fleet.ActConfigure:
			m := c.slot(a.Machine)
			m.op, m.issued, m.cluster, m.tries, m.due = opConfigure, false, a.Cluster, 0, time.Time{}
			c.configure(ctx, now, a.Machine)
		case fleet.ActDrain:
			m := c.slot(a.Machine)
			m.op, m.issued, m.tries, m.due = opDrain, false, 0, now.Add(a.Grace)
			if name := c.clusterName(a.Cluster); name != "" {
				why := c.drainReason(a)
				if a.Reason == fleet.ReasonPreempt {
					c.log.Info("preempting a machine", "machine", m.id, "from", name, "grace", a.Grace, "why", why)
				}
				if err := c.op.Cordon(ctx, name, m.id, a.Grace, why); err != nil {
					c.log.Warn("cordon failed; draining after the grace anyway", "machine", m.id, "err", err)
				}
			}
			if a.Grace <= 0 {
				c.drain(ctx, now, a.Machine)
			}
		case fleet.ActRelease:
			m := c.slot(a.Machine)
			m.op, m.issued, m.tries = opDelete, false, 0
			c.release(ctx, now, a.Machine)
		case fleet.ActExport:
			c.exported(a)
		case fleet.ActShortfall:
			// Escalations travel in the report.
		}
		if c.deposed {
			return
		}
	}
	if len(creates) > 0 {
		c.createAll(ctx, now, creates)
	}
}

// createAll records the new machines in etcd, then creates them. Without
// the records (etcd unreachable, lease lost) nothing is created: the slots
// return to Speculative and the offerings back off: provisioning pauses.
func (c *Controller) createAll(ctx context.Context, now time.Time, slots []fleet.MachineID) {
	recs := make(map[string]etcdstate.MachineRecord, len(slots))
	for _, s := range slots {
		info, _ := c.shard.Machine(s)
		spec, _ := c.cat.OfferingSpec(info.Offering)
		m := c.slot(s)
		c.next++
		m.id = fmt.Sprintf("%s-e%d-%d", c.cfg.Pool, c.epoch, c.next)
		m.prov, m.op, m.issued, m.tries = spec.Provider, opCreate, false, 0
		c.byID[m.id] = s
		recs[m.id] = etcdstate.MachineRecord{Provider: spec.Provider, Offering: spec.Offering.Name(),
			ReclamationPenalty: info.ReclamationPenalty}
	}
	var err error
	if c.lost {
		err = errors.New("lease lost")
		c.pause("lease lost: provisioning waits")
	} else if err = c.store.PutMachines(ctx, uint16(c.cfg.Shard), c.epoch, recs); err != nil {
		c.etcdFailed("machine records", err)
	}
	if err != nil {
		obs := make([]fleet.Observation, 0, len(slots))
		for _, s := range slots {
			if !c.lost {
				c.unrecord = append(c.unrecord, c.slot(s).id) // a chunk may have been written
			}
			c.forget(s)
			obs = append(obs, fleet.Observation{Machine: s, State: fleet.Speculative})
		}
		c.apply(now, obs)
		return
	}
	for _, s := range slots {
		c.create(ctx, s)
		if c.deposed {
			return
		}
	}
}

// create calls Create for a recorded machine.
func (c *Controller) create(ctx context.Context, slot fleet.MachineID) {
	m := c.slot(slot)
	info, _ := c.shard.Machine(slot)
	spec, _ := c.cat.OfferingSpec(info.Offering)
	ack, err := c.provs[m.prov].Create(ctx, provider.CreateRequest{Fence: c.fence(), Pool: c.cfg.Pool,
		MachineID: m.id, Offering: spec.Offering.Name(),
		Labels: map[string]string{"tide.fleet/shard": c.cfg.Shard.String()}})
	now := c.clock.Now()
	switch {
	case err == nil:
		m.issued, m.op, m.tries = true, opNone, 0
		if st := toState(ack.State); st != fleet.Creating {
			c.apply(now, []fleet.Observation{{Machine: slot, State: st, Host: st != fleet.Creating}})
		}
	case provider.IsStaleFence(err):
		c.fail(fmt.Errorf("%w: %w", ErrDeposed, err))
	case provider.IsInsufficientCapacity(err), provider.IsQuotaExceeded(err), provider.IsInvalid(err),
		provider.IsConflict(err):
		c.log.Info("create refused; the offering backs off", "machine", m.id, "offering", spec.Offering.Name(),
			"err", err)
		c.unrecord = append(c.unrecord, m.id)
		c.forget(slot)
		c.apply(now, []fleet.Observation{{Machine: slot, State: fleet.Speculative}})
	default:
		m.tries++
		if m.tries >= c.cfg.MaxRetries {
			// It may exist (a lost answer): List shows it, and it is
			// adopted by id; until then the slot waits as Creating.
			m.issued, m.op = true, opNone
		}
		c.fail(fmt.Errorf("create %s: %w", m.id, err))
	}
}

// configure bootstraps a machine into its cluster.
func (c *Controller) configure(ctx context.Context, now time.Time, slot fleet.MachineID) {
	m := c.slot(slot)
	name := c.clusterName(m.cluster)
	var blob []byte
	var err error
	if name == "" {
		err = fmt.Errorf("cluster %s: unknown to this shard", m.cluster)
	} else {
		blob, err = c.op.Bootstrap(ctx, name, m.id, c.cat.ProfileName(c.cat.OfferingProfile(c.offeringOf(slot))))
	}
	switch {
	case errors.Is(err, ErrBootstrapPending):
		if m.due.IsZero() {
			m.due = now.Add(c.cfg.BootstrapTimeout)
		}
		if now.Before(m.due) {
			return // asked; the answer comes with the cluster's next needs
		}
		m.tries = c.cfg.MaxRetries
		err = fmt.Errorf("cluster %q did not answer its bootstrap request within %s", name, c.cfg.BootstrapTimeout)
	case errors.Is(err, ErrBootstrapRefused):
		m.issued, m.op = true, opNone
		c.log.Info("cluster refused the machine; it returns to Idle", "machine", m.id, "cluster", name, "err", err)
		c.apply(now, []fleet.Observation{{Machine: slot, State: fleet.Idle, Host: true}})
		return
	}
	var ack provider.Ack
	if err == nil {
		ack, err = c.provs[m.prov].Configure(ctx, provider.ConfigureRequest{Fence: c.fence(), Pool: c.cfg.Pool,
			MachineID: m.id, Cluster: name, Bootstrap: blob})
	}
	c.outcome(now, slot, "configure", ack, err)
}

// drain unbinds a machine whose grace has passed.
func (c *Controller) drain(ctx context.Context, now time.Time, slot fleet.MachineID) {
	m := c.slot(slot)
	ack, err := c.provs[m.prov].Drain(ctx, provider.DrainRequest{Fence: c.fence(), Pool: c.cfg.Pool, MachineID: m.id})
	c.outcome(now, slot, "drain", ack, err)
}

// outcome handles the answer to a Configure or Drain.
func (c *Controller) outcome(now time.Time, slot fleet.MachineID, what string, ack provider.Ack, err error) {
	m := c.slot(slot)
	switch {
	case err == nil:
		m.issued, m.op, m.tries = true, opNone, 0
		st := toState(ack.State)
		o := fleet.Observation{Machine: slot, State: st, Host: true}
		if st == fleet.Configuring || st == fleet.Configured || st == fleet.Draining {
			info, _ := c.shard.Machine(slot)
			o.Cluster = info.Cluster
		}
		c.apply(now, []fleet.Observation{o})
	case provider.IsStaleFence(err):
		c.fail(fmt.Errorf("%w: %w", ErrDeposed, err))
	case provider.IsNotFound(err):
		c.unrecord = append(c.unrecord, m.id)
		c.forget(slot)
		c.apply(now, []fleet.Observation{{Machine: slot, State: fleet.Speculative}})
	case provider.IsConflict(err), provider.IsInvalid(err):
		// The machine is not where the shard thought: take the provider's
		// view on the next List.
		m.issued, m.op, m.tries = true, opNone, 0
		c.log.Warn(what+" refused; re-reading the machine", "machine", m.id, "err", err)
	default:
		m.tries++
		if what == "configure" && m.tries >= c.cfg.MaxRetries {
			m.issued, m.op = true, opNone
			c.apply(now, []fleet.Observation{{Machine: slot, State: fleet.Idle, Host: true}})
		}
		c.fail(fmt.Errorf("%s %s: %w", what, m.id, err))
	}
}

// release deletes a machine until NotFound; then its slot is quota again.
func (c *Controller) release(ctx context.Context, now time.Time, slot fleet.MachineID) {
	m := c.slot(slot)
	if m.id == "" { // never created
		c.apply(now, []fleet.Observation{{Machine: slot, State: fleet.Speculative}})
		c.forget(slot)
		return
	}
	_, err := c.provs[m.prov].Delete(ctx, provider.DeleteRequest{Fence: c.fence(), Pool: c.cfg.Pool, MachineID: m.id})
	switch {
	case err == nil:
		m.issued = true
	case provider.IsNotFound(err):
		c.unrecord = append(c.unrecord, m.id)
		c.forget(slot)
		c.apply(now, []fleet.Observation{{Machine: slot, State: fleet.Speculative}})
	case provider.IsStaleFence(err):
		c.fail(fmt.Errorf("%w: %w", ErrDeposed, err))
	default:
		c.fail(fmt.Errorf("delete %s: %w", m.id, err))
	}
}
