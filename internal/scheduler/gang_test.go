package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func gangOf(name string, size int, gpus int64, prio int) []Instance {
	out := make([]Instance, size)
	for r := range out {
		out[r] = with(inst(fmt.Sprintf("%s-%d", name, r), 1, 1, gpus), func(i *Instance) {
			i.Gang, i.GangSize, i.GangRank, i.Priority = name, size, r, prio
		})
	}
	return out
}

// Priorities: higher first, FIFO within one priority.
func TestPlacePriorityFirst(t *testing.T) {
	ws := []Worker{wk("a", 8, 32, 2)}
	pending := []Instance{inst("old", 1, 1, 1), with(inst("hi", 1, 1, 1), func(i *Instance) { i.Priority = 5 }),
		inst("new", 1, 1, 1), with(inst("hi2", 1, 1, 1), func(i *Instance) { i.Priority = 5 })}
	res := Place(ws, nil, pending, Config{}, now)
	if got := render(res.Assignments); !slices.Equal(got, []string{"hi2@a[1]", "hi@a[0]"}) {
		t.Fatalf("placed %v, want hi and hi2", got)
	}
	pr := res.Pressure[""]
	if len(pr.Pending) != 1 || pr.Pending[0].Count != 2 || pr.Pending[0].Priority != 0 {
		t.Fatalf("pending report %+v", pr.Pending)
	}
}

// Two 3-instance gangs on room for 4: one is placed whole, the other waits
// whole (never 2+2), and its members are reported as one gang's demand.
func TestPlaceGangAllOrNothing(t *testing.T) {
	ws := []Worker{wk("a", 8, 32, 2), wk("b", 8, 32, 2)}
	pending := append(gangOf("g1", 3, 1, 0), gangOf("g2", 3, 1, 0)...)
	res := Place(ws, nil, pending, Config{}, now)
	got := render(res.Assignments)
	if len(got) != 3 || !strings.HasPrefix(got[0], "g1-") || !strings.HasPrefix(got[2], "g1-") {
		t.Fatalf("placed %v, want g1 whole", got)
	}
	for r := range 3 {
		id := fmt.Sprintf("g2-%d", r)
		if !strings.Contains(res.Waiting[id], "gang of 3: 1 of 3 placeable now") {
			t.Fatalf("%s waits: %q", id, res.Waiting[id])
		}
	}
	pr := res.Pressure[""]
	if len(pr.Pending) != 1 || pr.Pending[0].Count != 3 || pr.Pending[0].Gang != "g2" {
		t.Fatalf("pending report %+v", pr.Pending)
	}
	// The free GPU stays free for later lone work: the failed gang gave back what it tried.
	lone := inst("lone", 1, 1, 1)
	res = Place(ws, nil, append(pending, lone), Config{}, now)
	if !slices.Contains(render(res.Assignments), "lone@b[1]") && !slices.Contains(render(res.Assignments), "lone@a[1]") {
		t.Fatalf("lone not placed: %v", render(res.Assignments))
	}
	// A gang with a placed member and a member never placed (its first
	// placement torn by a race in the store) places that member alone.
	started := placedOn("a", gangOf("g3", 2, 1, 0)[0], 0)
	res = Place(ws, []Instance{started}, gangOf("g3", 2, 1, 0)[1:], Config{}, now)
	if len(res.Assignments) != 1 {
		t.Fatalf("torn member not placed: %v %v", render(res.Assignments), res.Waiting)
	}
}

// A member of a started gang that was placed before and waits again (its
// attempt ended: a lost worker, a preemption, its restart policy) is not
// placed alone, buys nothing and preempts nothing: it waits for the rest of
// its gang to stop, so that the gang starts again whole.
func TestRestartingGangMemberWaitsForItsGang(t *testing.T) {
	ws := []Worker{wk("a", 8, 32, 2), wk("b", 8, 32, 2)}
	g := gangOf("g", 3, 1, 0)
	running := []Instance{placedOn("a", g[0], 0), placedOn("a", g[1], 1)}
	again := with(g[2], func(i *Instance) { i.Attempt = 1 })
	res := Place(ws, running, []Instance{again}, Config{Preemptible: func(string) bool { return true }}, now)
	if len(res.Assignments) != 0 || len(res.Preemptions) != 0 {
		t.Fatalf("a restarting member placed alone or preempting: %v %+v", render(res.Assignments), res.Preemptions)
	}
	if w := res.Waiting["g-2"]; !strings.Contains(w, "gang of 3 restarting: rank 2 waits for the 2 placed members of its gang to stop") {
		t.Fatalf("waits: %q", w)
	}
	for pool, pr := range res.Pressure {
		if len(pr.Pending) != 0 {
			t.Fatalf("pool %q buys for a restarting member: %+v", pool, pr.Pending)
		}
	}
	// Once the others stopped and wait again too, the gang is placed whole.
	all := []Instance{with(g[0], func(i *Instance) { i.Attempt = 1 }), with(g[1], func(i *Instance) { i.Attempt = 1 }), again}
	if res := Place(ws, nil, all, Config{}, now); len(res.Assignments) != 3 {
		t.Fatalf("restarted gang: %v %v", render(res.Assignments), res.Waiting)
	}
}

// Property: over random workers and gangs, no gang is ever partly placed
// and no worker is overcommitted.
func TestPlaceGangNeverPartial(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 1))
	for trial := range 300 {
		var ws []Worker
		for w := range 1 + rng.IntN(5) {
			ws = append(ws, wk(fmt.Sprintf("w%d", w), 4+rng.Int64N(8), 16, rng.Int64N(5)))
		}
		var pending []Instance
		for g := range 1 + rng.IntN(6) {
			pending = append(pending, gangOf(fmt.Sprintf("g%d", g), 1+rng.IntN(5), rng.Int64N(3), rng.IntN(3))...)
		}
		for k := range rng.IntN(5) {
			pending = append(pending, inst(fmt.Sprintf("solo%d", k), 1+rng.Int64N(3), 1, rng.Int64N(2)))
		}
		res := Place(ws, nil, pending, Config{ReserveAfter: 1}, now.Add(5))
		placed := map[string]int{}
		for _, a := range res.Assignments {
			if i := strings.LastIndexByte(a.InstanceID, '-'); i > 0 {
				placed[a.InstanceID[:i]]++
			}
		}
		for _, p := range pending {
			if p.Gang != "" && placed[p.Gang] != 0 && placed[p.Gang] != p.GangSize {
				t.Fatalf("trial %d: gang %s placed %d of %d", trial, p.Gang, placed[p.Gang], p.GangSize)
			}
		}
		checkNoOvercommit(t, ws, pending, res.Assignments)
	}
}

func checkNoOvercommit(t *testing.T, ws []Worker, pending []Instance, as []Assignment) {
	t.Helper()
	byID := map[string]Instance{}
	for _, p := range pending {
		byID[p.ID] = p
	}
	cpu := map[string]int64{}
	gpus := map[string]map[int]bool{}
	for _, a := range as {
		p := byID[a.InstanceID]
		cpu[a.Worker] += p.Requests.MilliCPU
		if gpus[a.Worker] == nil {
			gpus[a.Worker] = map[int]bool{}
		}
		for _, g := range a.GPUIndices {
			if gpus[a.Worker][g] {
				t.Fatalf("gpu %d of %s given twice", g, a.Worker)
			}
			gpus[a.Worker][g] = true
		}
	}
	for _, w := range ws {
		if cpu[w.Name] > w.Capacity.MilliCPU {
			t.Fatalf("%s overcommitted: %d of %d", w.Name, cpu[w.Name], w.Capacity.MilliCPU)
		}
	}
}

func preemptible(string) bool { return true }

// A waiting instance of higher priority preempts the lowest-priority
// restartable work on a full worker, never non-restartable work, never
// work of equal or higher priority; evicting victims are not chosen twice.
func TestPreempt(t *testing.T) {
	ws := []Worker{wk("a", 8, 32, 2)}
	restartable := func(i Instance, prio int) Instance {
		return with(i, func(i *Instance) { i.Restartable, i.Priority = true, prio })
	}
	placed := []Instance{placedOn("a", restartable(inst("lo", 1, 1, 1), 1), 0),
		placedOn("a", restartable(inst("lowest", 1, 1, 1), 0), 1)}
	hi := with(inst("hi", 1, 1, 1), func(i *Instance) { i.Priority = 10 })
	res := Place(ws, placed, []Instance{hi}, Config{Preemptible: preemptible}, now)
	if len(res.Preemptions) != 1 || res.Preemptions[0].For != "hi" || len(res.Preemptions[0].Victims) != 1 ||
		res.Preemptions[0].Victims[0].ID != "lowest" {
		t.Fatalf("preemptions %+v, want lowest for hi", res.Preemptions)
	}
	// Once evicting, it is kept going and nothing else is chosen.
	res = Place(ws, placed, []Instance{hi}, Config{Preemptible: preemptible, Evicting: map[string]bool{"lowest": true}}, now)
	if len(res.Preemptions) != 1 || len(res.Preemptions[0].Victims) != 1 || !res.Preemptions[0].Victims[0].Evicting {
		t.Fatalf("preemptions while evicting %+v", res.Preemptions)
	}
	// Not in a pool that may still grow.
	res = Place(ws, placed, []Instance{hi}, Config{Preemptible: func(string) bool { return false }}, now)
	if len(res.Preemptions) != 0 {
		t.Fatalf("preempted in a growing pool: %+v", res.Preemptions)
	}
	// Never non-restartable work, nor equal priority.
	fixed := []Instance{placedOn("a", with(inst("n1", 1, 1, 1), func(i *Instance) { i.Priority = -5 }), 0),
		placedOn("a", restartable(inst("eq", 1, 1, 1), 10), 1)}
	res = Place(ws, fixed, []Instance{hi}, Config{Preemptible: preemptible}, now)
	if len(res.Preemptions) != 0 {
		t.Fatalf("preempted non-restartable or equal work: %+v", res.Preemptions)
	}
	if len(res.Assignments) != 0 {
		t.Fatal("placed on a full worker")
	}
}

// A gang that waited ReserveAfter reserves a worker per member: small work
// queued after it no longer takes the room it waits for.
func TestGangReservesWhenStarved(t *testing.T) {
	ws := []Worker{wk("a", 8, 32, 2), wk("b", 8, 32, 2)}
	placed := []Instance{placedOn("a", inst("busy", 1, 1, 1), 0)}
	gang := gangOf("g", 2, 2, 0) // needs both workers whole
	small := with(inst("small", 1, 1, 1), func(i *Instance) { i.QueuedAt = now.Add(time.Minute) })
	cfg := Config{ReserveAfter: time.Minute}
	res := Place(ws, placed, append(slices.Clone(gang), small), cfg, now.Add(30*time.Second))
	if got := render(res.Assignments); !slices.Equal(got, []string{"small@b[0]"}) && !slices.Equal(got, []string{"small@a[1]"}) {
		t.Fatalf("before the gang starves: %v", got)
	}
	res = Place(ws, placed, append(slices.Clone(gang), small), cfg, now.Add(2*time.Minute))
	if len(res.Assignments) != 0 || len(res.Reserved) != 2 || !strings.Contains(res.Waiting["g-0"], "reserved workers") {
		t.Fatalf("starved gang: placed %v, reserved %v, waiting %q", render(res.Assignments), res.Reserved, res.Waiting["g-0"])
	}
	// Once busy ends, the gang takes both workers.
	res = Place(ws, nil, append(slices.Clone(gang), small), cfg, now.Add(3*time.Minute))
	if got := render(res.Assignments); len(got) != 2 || !strings.HasPrefix(got[0], "g-") || !strings.HasPrefix(got[1], "g-") {
		t.Fatalf("after: %v", got)
	}
}

// A waiting gang of higher priority preempts for all its members at once
// or for none: on two full workers it takes one restartable victim on
// each; when one member can find no room, nothing is preempted for it.
func TestGangPreemptsWholeOrNot(t *testing.T) {
	ws := []Worker{wk("a", 8, 32, 1), wk("b", 8, 32, 1)}
	restartable := func(i Instance) Instance { return with(i, func(i *Instance) { i.Restartable = true }) }
	placed := []Instance{placedOn("a", restartable(inst("va", 1, 1, 1)), 0), placedOn("b", restartable(inst("vb", 1, 1, 1)), 0)}
	gang := gangOf("hg", 2, 1, 5)
	res := Place(ws, placed, gang, Config{Preemptible: preemptible}, now)
	var victims []string
	for _, pr := range res.Preemptions {
		for _, v := range pr.Victims {
			victims = append(victims, v.ID)
		}
	}
	slices.Sort(victims)
	if !slices.Equal(victims, []string{"va", "vb"}) {
		t.Fatalf("preemptions %+v, want va and vb for the gang", res.Preemptions)
	}
	// vb is not restartable: the gang cannot make room for both, so it preempts neither.
	placed[1] = placedOn("b", inst("vb", 1, 1, 1), 0)
	res = Place(ws, placed, gang, Config{Preemptible: preemptible}, now)
	if len(res.Preemptions) != 0 {
		t.Fatalf("preemptions %+v for a gang that cannot fit whole", res.Preemptions)
	}
	// A lone instance of the same priority after it still may take va's room.
	lone := with(inst("lone", 1, 1, 1), func(i *Instance) { i.Priority = 5 })
	res = Place(ws, placed, append(slices.Clone(gang), lone), Config{Preemptible: preemptible}, now)
	if len(res.Preemptions) != 1 || res.Preemptions[0].For != "lone" || res.Preemptions[0].Victims[0].ID != "va" {
		t.Fatalf("preemptions %+v, want va for lone (the gang gave back what it planned)", res.Preemptions)
	}
}
