package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// The per-machine state byte: the State in the low nibble, then flags.
const (
	stateMask = 0x0f
	hostBit   = 0x10 // the machine has a host (hardware)
	resBit    = 0x20 // the machine is reserved for an allocation (see Shard.reserved)
	freshBit  = 0x40 // the machine was acted on in this cycle: no second action
	// releaseBit marks a machine its cluster gave back in this cycle's needs
	// (ClusterCapacityNeeds.Release); any move clears it.
	releaseBit = 0x80
)

// noAlloc is "no reservation" in move.
const noAlloc = ^uint32(0)

// exportSink is the allocation that machines drained for the coordinator are
// reserved for; it has no cluster.
const exportSink = 0

// maxMachines bounds a shard's slots (slot+1 must fit a uint32 link).
const maxMachines = math.MaxUint32 - 1

// list is an intrusive doubly-linked list over the shard's next/prev arrays.
// head and tail hold slot+1, so the zero list is empty.
type list struct{ head, tail, n uint32 }

// group is the set of a shard's machines sharing an offering and a
// reclamation penalty. Machines store a 16-bit group id instead of both.
type group struct {
	offering OfferingID
	profile  ProfileID
	reclaim  float64
	cost     float64
	release  int64 // seconds an Idle machine waits before release; < 0: never
	backoff  uint32
	spec     list // Speculative
	idle     list // Idle, unreserved; oldest first
	arriving list // Creating or Draining, unreserved: Idle soon
}

// sub is an allocation's bound machines of one group.
type sub struct {
	group uint16
	l     list
}

// alloc is one (cluster, profile) line: the need and the machines bound to
// it or on their way to it.
type alloc struct {
	cluster  ClusterID
	profile  ProfileID
	priority int32
	want     int32
	penalty  float64
	drain    float64 // seconds
	topology string
	lists    []sub // Configuring and Configured machines, by group
	in       list  // reserved machines: Creating, Draining elsewhere, or Idle awaiting Configure
	seen     uint64
	known    bool // the cluster has sent needs at least once
	dirty    bool // in Shard.dirty
	short    bool // in Shard.short
	inWork   bool // in this cycle's worklist
}

func (a *alloc) bound() int32 {
	var n uint32
	for i := range a.lists {
		n += a.lists[i].l.n
	}
	return int32(n)
}

// deficit is want minus what is bound or on its way (negative: excess).
func (a *alloc) deficit() int32 { return a.want - a.bound() - int32(a.in.n) }

func (a *alloc) sub(g uint16) *list {
	for i := range a.lists {
		if a.lists[i].group == g {
			return &a.lists[i].l
		}
	}
	a.lists = append(a.lists, sub{group: g})
	return &a.lists[len(a.lists)-1].l
}

type profileState struct {
	idleOrder    []uint16 // groups by reclamation penalty desc, then cost asc
	specOrder    []uint16 // groups by effective cost asc, then reclamation penalty desc
	reclaimOrder []uint16 // groups by reclamation penalty asc, then cost desc
	allocs       []uint32
	floor        int32
	floorCycle   uint64
}

type clusterState struct {
	allocs []uint32
	known  bool
}

type groupKey struct {
	offering OfferingID
	reclaim  uint64 // math.Float64bits
}

// Shard is one shard's inventory and decision engine (BigFleet §5, §8, §9).
// It is a value the driver owns: not safe for concurrent use, no I/O, no
// clock (time is an argument, and must not go backwards). See the package
// doc for the driver's loop.
type Shard struct {
	cat   *Catalog
	cfg   Config
	epoch time.Time
	now   uint32 // seconds since epoch
	cycle uint64

	// The inventory, one entry per slot (struct of arrays).
	st    []uint8  // State | hostBit | resBit
	grp   []uint16 // group: offering and reclamation penalty
	cl    []uint32 // cluster; 0 when unbound
	since []uint32 // seconds since epoch the machine entered its state
	next  []uint32 // list links, slot+1
	prev  []uint32

	free   list // unused slots
	failed list // Failed machines, released by the next Decide

	groups   []group
	groupIdx map[groupKey]uint16
	profs    []profileState
	allocs   []alloc
	allocIdx map[uint64]uint32
	clusters map[ClusterID]*clusterState
	// reserved maps a machine on its way to an allocation (Creating,
	// Draining elsewhere, or Idle awaiting Configure) to it. Only machines in
	// flight are here, so it stays small in steady state.
	reserved map[uint32]uint32
	handoffs []uint32 // reserved machines that became Idle
	released []uint32 // machines marked with releaseBit in this cycle
	dirty    []uint32 // allocations to re-evaluate
	short    []uint32 // allocations left with a deficit by the last cycle

	// Scratch, reused every cycle.
	work    []uint32
	surplus []uint32
	cands   []candidate
	acts    []Action
	sf      map[sfKey]*sfRecord
	sfAgg   map[sfKey]sfAgg
	sfRecs  []*sfRecord
	sfList  []Shortfall
}

// NewShard returns an empty shard. now is the shard's epoch: machine
// timestamps are kept as whole seconds since it.
func NewShard(cat *Catalog, cfg Config, now time.Time) (*Shard, error) {
	if cat == nil {
		return nil, errors.New("catalog: must be set")
	}
	cfg, err := cfg.Validate()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	s := &Shard{cat: cat, cfg: cfg, epoch: now, groupIdx: map[groupKey]uint16{},
		profs: make([]profileState, cat.Profiles()), allocIdx: map[uint64]uint32{},
		clusters: map[ClusterID]*clusterState{}, reserved: map[uint32]uint32{},
		sf: map[sfKey]*sfRecord{}, sfAgg: map[sfKey]sfAgg{}}
	s.allocs = append(s.allocs, alloc{known: true}) // exportSink
	return s, nil
}

// Config returns the shard's configuration with defaults filled in.
func (s *Shard) Config() Config { return s.cfg }

// Catalog returns the shard's catalog.
func (s *Shard) Catalog() *Catalog { return s.cat }

// Len returns the number of slots (machines plus free slots).
func (s *Shard) Len() int { return len(s.st) }

// Cycle returns how many times Decide has run.
func (s *Shard) Cycle() uint64 { return s.cycle }

func (s *Shard) setNow(now time.Time) {
	d := now.Sub(s.epoch)
	var sec uint32
	switch {
	case d <= 0:
	case d/time.Second >= math.MaxUint32:
		sec = math.MaxUint32
	default:
		sec = uint32(d / time.Second)
	}
	s.now = max(s.now, sec)
}

func (s *Shard) state(m uint32) State { return State(s.st[m] & stateMask) }
func (s *Shard) host(m uint32) bool   { return s.st[m]&hostBit != 0 }
func (s *Shard) profileOf(m uint32) ProfileID {
	return s.groups[s.grp[m]].profile
}

func allocKey(c ClusterID, p ProfileID) uint64 { return uint64(c)<<16 | uint64(p) }

// pushBack appends m to l.
func (s *Shard) pushBack(l *list, m uint32) {
	id := m + 1
	s.prev[m], s.next[m] = l.tail, 0
	if l.tail != 0 {
		s.next[l.tail-1] = id
	} else {
		l.head = id
	}
	l.tail = id
	l.n++
}

// unlink removes m from l.
func (s *Shard) unlink(l *list, m uint32) {
	p, n := s.prev[m], s.next[m]
	if p != 0 {
		s.next[p-1] = n
	} else {
		l.head = n
	}
	if n != 0 {
		s.prev[n-1] = p
	} else {
		l.tail = p
	}
	s.prev[m], s.next[m] = 0, 0
	l.n--
}

// listOf returns the list m belongs in, by its state and reservation; nil
// for Deleting machines, which are in no list. With create unset it also
// returns nil when the allocation has no sub-list for m's group yet.
func (s *Shard) listOf(m uint32, create bool) *list {
	b := s.st[m]
	switch st := State(b & stateMask); st {
	case 0:
		return &s.free
	case Speculative:
		return &s.groups[s.grp[m]].spec
	case Creating, Idle, Draining:
		if b&resBit != 0 {
			return &s.allocs[s.reserved[m]].in
		}
		if st == Idle {
			return &s.groups[s.grp[m]].idle
		}
		return &s.groups[s.grp[m]].arriving
	case Configuring, Configured:
		a, ok := s.allocIdx[allocKey(ClusterID(s.cl[m]), s.profileOf(m))]
		if !ok {
			return nil
		}
		if create {
			return s.allocs[a].sub(s.grp[m])
		}
		return s.findSub(&s.allocs[a], s.grp[m])
	case Failed:
		return &s.failed
	}
	return nil
}

// move puts m in a new state, host, cluster and reservation (noAlloc for
// none), keeping every list consistent. The caller touches the allocations
// whose counts change when it matters.
func (s *Shard) move(m uint32, st State, host bool, cluster ClusterID, res uint32) {
	if l := s.listOf(m, false); l != nil {
		s.unlink(l, m)
	}
	old := s.st[m]
	b := uint8(st)
	if host {
		b |= hostBit
	}
	if st != 0 {
		b |= old & freshBit
	}
	if res != noAlloc {
		b |= resBit
		s.reserved[m] = res
	} else if old&resBit != 0 {
		delete(s.reserved, m)
	}
	if State(old&stateMask) != st {
		s.since[m] = s.now
	}
	s.st[m], s.cl[m] = b, uint32(cluster)
	if l := s.listOf(m, true); l != nil {
		s.pushBack(l, m)
	}
}

// place puts a slot that is on no list (fresh from grow, or just taken off
// the free list) in a state, unreserved.
func (s *Shard) place(m uint32, g uint16, st State, host bool, cluster ClusterID) {
	b := uint8(st)
	if host {
		b |= hostBit
	}
	s.st[m], s.grp[m], s.cl[m], s.since[m] = b, g, uint32(cluster), s.now
	s.pushBack(s.listOf(m, true), m)
}

func (s *Shard) touch(a uint32) {
	if a == exportSink {
		return
	}
	if A := &s.allocs[a]; !A.dirty {
		A.dirty = true
		s.dirty = append(s.dirty, a)
	}
}

// groupFor interns (offering, reclamation penalty).
func (s *Shard) groupFor(o OfferingID, reclaim float64) (uint16, error) {
	key := groupKey{o, math.Float64bits(reclaim)}
	if g, ok := s.groupIdx[key]; ok {
		return g, nil
	}
	if len(s.groups) >= math.MaxUint16 {
		return 0, fmt.Errorf("reclamation_penalty: more than %d distinct (offering, reclamation penalty) pairs", math.MaxUint16)
	}
	g := uint16(len(s.groups))
	release := int64(-1)
	if d := s.cfg.ReleaseAfter[s.cat.kind(o)]; d >= 0 {
		release = int64(d / time.Second)
	}
	p := s.cat.OfferingProfile(o)
	s.groups = append(s.groups, group{offering: o, profile: p, reclaim: reclaim, cost: s.cat.EffectiveCost(o),
		release: release})
	s.groupIdx[key] = g
	P := &s.profs[p]
	P.idleOrder = append(P.idleOrder, g)
	P.specOrder = append(P.specOrder, g)
	P.reclaimOrder = append(P.reclaimOrder, g)
	gs := s.groups
	slices.SortFunc(P.idleOrder, func(a, b uint16) int {
		return cmp.Or(cmp.Compare(gs[b].reclaim, gs[a].reclaim), cmp.Compare(gs[a].cost, gs[b].cost), cmp.Compare(a, b))
	})
	slices.SortFunc(P.specOrder, func(a, b uint16) int {
		return cmp.Or(cmp.Compare(gs[a].cost, gs[b].cost), cmp.Compare(gs[b].reclaim, gs[a].reclaim), cmp.Compare(a, b))
	})
	slices.SortFunc(P.reclaimOrder, func(a, b uint16) int {
		return cmp.Or(cmp.Compare(gs[a].reclaim, gs[b].reclaim), cmp.Compare(gs[b].cost, gs[a].cost), cmp.Compare(a, b))
	})
	return g, nil
}

func (s *Shard) clusterFor(c ClusterID) *clusterState {
	cs := s.clusters[c]
	if cs == nil {
		cs = &clusterState{}
		s.clusters[c] = cs
	}
	return cs
}

// allocFor returns the allocation of (c, p), creating it (want 0) if needed.
// It may grow s.allocs: never hold an *alloc across it.
func (s *Shard) allocFor(c ClusterID, p ProfileID) uint32 {
	key := allocKey(c, p)
	if a, ok := s.allocIdx[key]; ok {
		return a
	}
	cs := s.clusterFor(c)
	a := uint32(len(s.allocs))
	s.allocs = append(s.allocs, alloc{cluster: c, profile: p, known: cs.known,
		drain: s.cfg.DefaultDrainTime.Seconds()})
	s.allocIdx[key] = a
	cs.allocs = append(cs.allocs, a)
	s.profs[p].allocs = append(s.profs[p].allocs, a)
	return a
}

// MachineSpec describes machines to add to a shard's inventory: quota slots
// (Speculative) or machines a driver adopts after listing its providers.
type MachineSpec struct {
	Offering OfferingID
	// ReclamationPenalty is the machine-tied operational value lost when the
	// machine is reclaimed, in dollars (BigFleet §16): Phase 1 uses Idle
	// machines with high penalties first, and victim scoring and Phase 3
	// take low penalties first.
	ReclamationPenalty float64
	// State is the machine's state; zero means Speculative.
	State State
	// Host is set when the machine has hardware.
	Host bool
	// Cluster is the cluster it is bound to (Configuring, Configured,
	// Draining); 0 otherwise.
	Cluster ClusterID
}

func (s *Shard) checkSpec(spec *MachineSpec) error {
	if spec.State == 0 {
		spec.State = Speculative
	}
	if !s.cat.validOffering(spec.Offering) {
		return fmt.Errorf("offering: unknown offering %d", spec.Offering)
	}
	if p := spec.ReclamationPenalty; p < 0 || math.IsNaN(p) || math.IsInf(p, 0) {
		return fmt.Errorf("reclamation_penalty: must be a finite non-negative number, got %v", p)
	}
	return checkBinding(spec.State, spec.Host, spec.Cluster)
}

// Add appends n machines described by spec to the inventory and returns the
// first one's id; they take consecutive ids. Adopted machines bound to a
// cluster the shard has not heard from are left alone until its needs
// arrive. The arrays grow by exactly n, so adding in large batches keeps the
// inventory compact.
func (s *Shard) Add(now time.Time, spec MachineSpec, n int) (MachineID, error) {
	if err := s.checkSpec(&spec); err != nil {
		return 0, err
	}
	if n < 0 || len(s.st)+n > maxMachines {
		return 0, fmt.Errorf("n: %d machines do not fit (shard has %d, at most %d)", n, len(s.st), maxMachines)
	}
	g, err := s.groupFor(spec.Offering, spec.ReclamationPenalty)
	if err != nil {
		return 0, err
	}
	s.setNow(now)
	first := uint32(len(s.st))
	s.grow(n)
	if spec.State == Configuring || spec.State == Configured {
		s.touch(s.allocFor(spec.Cluster, s.groups[g].profile))
	}
	for m := first; m < first+uint32(n); m++ {
		if spec.State == Deleting {
			s.st[m], s.grp[m], s.cl[m], s.since[m] = uint8(Deleting)|hostBitIf(spec.Host), g, uint32(spec.Cluster), s.now
			continue
		}
		s.place(m, g, spec.State, spec.Host, spec.Cluster)
	}
	return MachineID(first), nil
}

func hostBitIf(host bool) uint8 {
	if host {
		return hostBit
	}
	return 0
}

// Reserve makes room for n more machines, so that the Adds and Imports that
// follow do not reallocate the inventory: a driver adopting a large
// inventory in many Adds calls it once with the total.
func (s *Shard) Reserve(n int) {
	if n <= 0 {
		return
	}
	l := len(s.st)
	s.grow(n)
	s.st, s.grp, s.cl, s.since, s.next, s.prev = s.st[:l], s.grp[:l], s.cl[:l], s.since[:l], s.next[:l], s.prev[:l]
}

// grow appends n free-to-fill slots (state 0, in no list) with exact capacity.
func (s *Shard) grow(n int) {
	s.st = growExact(s.st, n)
	s.grp = growExact(s.grp, n)
	s.cl = growExact(s.cl, n)
	s.since = growExact(s.since, n)
	s.next = growExact(s.next, n)
	s.prev = growExact(s.prev, n)
}

func growExact[T any](x []T, n int) []T {
	if cap(x)-len(x) < n {
		y := make([]T, len(x), len(x)+n)
		copy(y, x)
		x = y
	}
	return x[:len(x)+n]
}

// Observation is what the driver learned of one machine from its provider:
// an Ack, a Get or a List entry, or a refused Create (State Speculative).
type Observation struct {
	Machine MachineID
	State   State
	Host    bool
	Cluster ClusterID
}

// Observe folds provider observations into the inventory. It is idempotent:
// observing a machine as it already is changes nothing. All observations are
// checked first (the machine model's rules, known slots); on an error none
// is applied. Transitions:
//
//	Creating → Idle              created; configured next Decide if reserved
//	Creating → Speculative       Create refused: the offering backs off
//	Configuring → Configured     joined
//	Draining → Idle              drained; configured next Decide if reserved
//	Deleting → Speculative       released: the slot is quota again
//	any → Failed                 released next Decide
//	any → other                  adopted as observed (lost machines return
//	                             to Speculative; unexpected bindings join
//	                             their cluster's allocation)
func (s *Shard) Observe(now time.Time, obs ...Observation) error {
	for i, o := range obs {
		if uint64(o.Machine) >= uint64(len(s.st)) || s.st[o.Machine] == 0 {
			return fmt.Errorf("observations[%d].machine: %s is not in this shard", i, o.Machine)
		}
		if err := checkBinding(o.State, o.Host, o.Cluster); err != nil {
			return fmt.Errorf("observations[%d] (%s): %w", i, o.Machine, err)
		}
	}
	s.setNow(now)
	for _, o := range obs {
		s.observe(o)
	}
	return nil
}

func (s *Shard) observe(o Observation) {
	m := uint32(o.Machine)
	cur := s.state(m)
	if cur == o.State && s.host(m) == o.Host && ClusterID(s.cl[m]) == o.Cluster {
		return
	}
	oldA, newA := noAlloc, noAlloc
	if cur == Configuring || cur == Configured {
		oldA = s.allocIdx[allocKey(ClusterID(s.cl[m]), s.profileOf(m))]
	}
	if o.State == Configuring || o.State == Configured {
		newA = s.allocFor(o.Cluster, s.profileOf(m))
	}
	res, handoff := noAlloc, false
	if s.st[m]&resBit != 0 {
		r := s.reserved[m]
		switch o.State {
		case Creating, Draining:
			res = r
		case Idle:
			res, handoff = r, true
		default: // joined its allocation (counts the same), or lost
			if r != newA {
				s.touch(r)
				if newA != noAlloc {
					s.touch(newA)
				}
			}
		}
	} else if oldA != newA {
		for _, a := range [...]uint32{oldA, newA} {
			if a != noAlloc {
				s.touch(a)
			}
		}
	}
	if cur == Creating && o.State == Speculative {
		s.groups[s.grp[m]].backoff = s.now + uint32(s.cfg.CreateBackoff/time.Second)
	}
	s.move(m, o.State, o.Host, o.Cluster, res)
	if handoff {
		s.handoffs = append(s.handoffs, m)
	}
}

// MachineInfo is one machine as the shard sees it.
type MachineInfo struct {
	State              State
	Host               bool
	Cluster            ClusterID
	Offering           OfferingID
	ReclamationPenalty float64
	// For is the cluster the machine is reserved for (on its way there);
	// 0 when none.
	For ClusterID
	// Exporting is set for a machine drained for the coordinator.
	Exporting bool
	// Since is when the machine entered its state (whole seconds).
	Since time.Time
}

// Machine returns what the shard knows of one machine; ok is false for an
// id that holds no machine.
func (s *Shard) Machine(id MachineID) (MachineInfo, bool) {
	m := uint32(id)
	if uint64(id) >= uint64(len(s.st)) || s.st[m] == 0 {
		return MachineInfo{}, false
	}
	g := &s.groups[s.grp[m]]
	info := MachineInfo{State: s.state(m), Host: s.host(m), Cluster: ClusterID(s.cl[m]), Offering: g.offering,
		ReclamationPenalty: g.reclaim, Since: s.epoch.Add(time.Duration(s.since[m]) * time.Second)}
	if s.st[m]&resBit != 0 {
		r := s.reserved[m]
		info.For, info.Exporting = s.allocs[r].cluster, r == exportSink
	}
	return info, true
}

// ClusterAlloc is one profile of what a cluster asked of the shard and holds.
type ClusterAlloc struct {
	Profile  ProfileID
	Priority int32
	// Want is the need's count; Bound counts the cluster's Configuring and
	// Configured machines of the profile; Incoming those reserved for it.
	Want, Bound, Incoming int32
}

// ClusterAllocs returns cluster c's allocations, one per profile it has
// needed; it costs the number of its profiles.
func (s *Shard) ClusterAllocs(c ClusterID) []ClusterAlloc {
	cs, ok := s.clusters[c]
	if !ok {
		return nil
	}
	out := make([]ClusterAlloc, 0, len(cs.allocs))
	for _, a := range cs.allocs {
		A := &s.allocs[a]
		out = append(out, ClusterAlloc{Profile: A.profile, Priority: A.priority, Want: A.want, Bound: A.bound(),
			Incoming: int32(A.in.n)})
	}
	return out
}
