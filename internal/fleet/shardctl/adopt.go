package shardctl

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/sdk/provider"
)

// Start takes the shard over: it acquires the ownership key on a new lease
// (its create revision becomes the epoch), reads the catalog, the shard's
// quota, machine records and clusters, lists the shard's pool at every
// provider and adopts what it finds (see the package doc). On an error
// nothing changes and the lease is released; etcdstate.ErrShardHeld means
// another controller holds the shard. Cycle calls it when needed.
func (c *Controller) Start(ctx context.Context) error {
	now := c.clock.Now()
	sess, lease, err := c.newSession(ctx)
	if err != nil {
		return err
	}
	release := func() {
		sess.Orphan()
		rctx, cancel := context.WithTimeout(ctx, c.store.Timeout())
		_, _ = c.store.Client().Revoke(rctx, lease)
		cancel()
	}
	epoch, err := c.store.AcquireShard(ctx, c.owner(), lease)
	if err != nil {
		release()
		return err
	}
	st, err := c.adopt(ctx, now, epoch)
	if err != nil {
		release()
		return fmt.Errorf("shard %s: adopt: %w", c.cfg.Shard, err)
	}
	if c.session != nil {
		c.session.Orphan()
	}
	c.session, c.lease, c.epoch = sess, lease, epoch
	c.started, c.lost = true, false
	c.cat, c.shard, c.machs, c.byID, c.quota, c.doomed = st.cat, st.shard, st.machs, st.byID, st.quota, st.doomed
	c.unrecord = st.unrecord
	c.next, c.seq = 0, 0
	c.pending, c.preempts, c.held = nil, map[string]*preemptRun{}, map[string]bool{}
	c.mu.Lock()
	c.catalog = st.cat
	for name, id := range st.clusters {
		c.clusters[name] = id
		c.names[id] = name
	}
	// Needs received before (a rebuild) are fed again.
	for id, n := range c.needs {
		if _, waiting := c.inbox[id]; !waiting {
			c.inbox[id] = n
		}
	}
	c.mu.Unlock()
	c.log.Info("shard taken over", "epoch", epoch, "machines", st.shard.Len(), "adopted", st.adopted,
		"doomed", len(st.doomed))
	return nil
}

// adopted is what adopt builds; Start swaps it in only on success.
type adopted struct {
	cat      *fleet.Catalog
	shard    *fleet.Shard
	machs    []mach
	byID     map[string]fleet.MachineID
	quota    []etcdstate.QuotaEntry
	doomed   map[string]doomed
	unrecord []string
	clusters map[string]fleet.ClusterID
	adopted  int
}

func (c *Controller) adopt(ctx context.Context, now time.Time, epoch int64) (*adopted, error) {
	id := uint16(c.cfg.Shard)
	conf, err := c.store.LoadConfig(ctx)
	if err != nil {
		return nil, err
	}
	cat, err := conf.Catalog()
	if err != nil {
		return nil, fmt.Errorf("fleet config: %w", err)
	}
	quota, err := c.store.LoadQuota(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := etcdstate.ValidateQuota(cat, quota); err != nil {
		return nil, fmt.Errorf("shard %s: %w", c.cfg.Shard, err)
	}
	recs, err := c.store.LoadMachines(ctx, id)
	if err != nil {
		return nil, err
	}
	clusters, err := c.store.LoadShardClusters(ctx, id)
	if err != nil {
		return nil, err
	}
	coord, err := c.store.LoadCoord(ctx)
	if err != nil {
		return nil, err
	}
	states := map[string]string{}
	for _, d := range coord.Directives {
		states[d.ID] = d.State
	}
	// Every provider named by the quota or the records is listed.
	names := map[string]bool{}
	for _, q := range quota {
		names[q.Provider] = true
	}
	for _, r := range recs {
		names[r.Provider] = true
	}
	var listed []provider.Machine
	listedBy := map[string]string{} // machine id → provider
	for _, pn := range slices.Sorted(maps.Keys(names)) {
		p, ok := c.provs[pn]
		if !ok {
			return nil, fmt.Errorf("providers: no provider %q (the shard's quota or machines name it)", pn)
		}
		ms, err := p.List(ctx, provider.Filter{Pool: c.cfg.Pool})
		if err != nil {
			return nil, fmt.Errorf("provider %s: list pool %s: %w", pn, c.cfg.Pool, err)
		}
		for _, m := range ms {
			listed = append(listed, m)
			listedBy[m.ID] = pn
		}
	}
	slices.SortFunc(listed, func(a, b provider.Machine) int { return cmp.Compare(a.ID, b.ID) })

	cfgEngine := c.cfg.Engine
	sh, err := fleet.NewShard(cat, cfgEngine, now)
	if err != nil {
		return nil, err
	}
	st := &adopted{cat: cat, shard: sh, byID: map[string]fleet.MachineID{}, quota: quota,
		doomed: map[string]doomed{}, clusters: map[string]fleet.ClusterID{}}
	for name, cid := range clusters {
		st.clusters[name] = fleet.ClusterID(cid)
	}
	total := len(listed)
	for _, q := range quota {
		total += q.Count
	}
	sh.Reserve(total)
	type qk struct{ prov, off string }
	used := map[qk]int{}
	undoom := map[string]etcdstate.MachineRecord{}
	for i := range listed {
		m := &listed[i]
		pn := listedBy[m.ID]
		if err := m.Check(); err != nil {
			c.log.Warn("leaving alone a machine the provider describes badly", "machine", m.ID, "err", err)
			continue
		}
		rec, ok := recs[m.ID]
		switch {
		case !ok || rec.Provider != pn:
			c.log.Warn("deleting a machine of the pool with no record", "machine", m.ID, "provider", pn)
			st.doomed[m.ID] = doomed{prov: pn, id: m.ID}
			continue
		case rec.DoomedBy != "" && states[rec.DoomedBy] != etcdstate.StatePending:
			st.doomed[m.ID] = doomed{prov: pn, id: m.ID, record: true}
			continue
		case rec.DoomedBy != "":
			rec.DoomedBy = "" // its directive was not carried out: the machine stays
			undoom[m.ID] = rec
		}
		off, ok := cat.Offering(rec.Provider, rec.Offering)
		if !ok {
			c.log.Warn("leaving alone a machine whose offering left the catalog", "machine", m.ID,
				"offering", rec.Offering)
			continue
		}
		spec, ok := machineSpec(m, st.clusters)
		if !ok {
			c.log.Warn("leaving alone a machine bound to a cluster of another shard", "machine", m.ID,
				"cluster", m.Cluster)
			continue
		}
		spec.Offering, spec.ReclamationPenalty = off, rec.ReclamationPenalty
		slot, err := sh.Add(now, spec, 1)
		if err != nil {
			return nil, fmt.Errorf("machine %s: %w", m.ID, err)
		}
		st.track(slot, mach{id: m.ID, prov: pn})
		used[qk{rec.Provider, rec.Offering}]++
		st.adopted++
	}
	for mid := range recs {
		if _, ok := listedBy[mid]; !ok {
			st.unrecord = append(st.unrecord, mid) // never created, or gone
		}
	}
	slices.Sort(st.unrecord)
	for _, q := range quota {
		n := q.Count - used[qk{q.Provider, q.Offering}]
		if n <= 0 {
			continue
		}
		off, _ := cat.Offering(q.Provider, q.Offering)
		first, err := sh.Add(now, fleet.MachineSpec{Offering: off, ReclamationPenalty: q.ReclamationPenalty}, n)
		if err != nil {
			return nil, fmt.Errorf("quota %s/%s: %w", q.Provider, q.Offering, err)
		}
		for s := first; s < first+fleet.MachineID(n); s++ {
			st.track(s, mach{prov: q.Provider})
		}
	}
	if len(undoom) > 0 {
		if err := c.store.PutMachines(ctx, id, epoch, undoom); err != nil {
			return nil, fmt.Errorf("machine records: %w", err)
		}
	}
	sh.Reevaluate()
	return st, nil
}

func (st *adopted) track(slot fleet.MachineID, m mach) {
	for int(slot) >= len(st.machs) {
		st.machs = append(st.machs, mach{})
	}
	st.machs[slot] = m
	if m.id != "" {
		st.byID[m.id] = slot
	}
}

// machineSpec converts a provider machine to the shard's terms; ok is false
// when it is bound to a cluster the shard does not know.
func machineSpec(m *provider.Machine, clusters map[string]fleet.ClusterID) (fleet.MachineSpec, bool) {
	spec := fleet.MachineSpec{State: toState(m.State), Host: m.Host != ""}
	if m.Cluster != "" {
		id, ok := clusters[m.Cluster]
		if !ok {
			return spec, false
		}
		spec.Cluster = id
	}
	if spec.State == fleet.Speculative || spec.State == fleet.Creating {
		spec.Host, spec.Cluster = false, 0
		spec.State = fleet.Creating
	}
	if spec.State == fleet.Idle || spec.State == fleet.Deleting || spec.State == fleet.Failed {
		spec.Cluster = 0
	}
	return spec, true
}

// toState converts a provider state; a machine the provider lists as
// Speculative has been accepted but not started: Creating for the shard.
func toState(s provider.State) fleet.State {
	st, err := fleet.ParseState(string(s))
	if err != nil || st == fleet.Speculative {
		return fleet.Creating
	}
	return st
}
