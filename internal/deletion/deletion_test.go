package deletion

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const delay = 10 * time.Minute

// pool returns n empty, unmarked, unprotected nodes n0..n{n-1} with ordinals 0..n-1.
func pool(n int, opts ...func([]Node)) []Node {
	ns := make([]Node, n)
	for i := range ns {
		ns[i] = Node{ID: fmt.Sprintf("n%d", i), Ordinal: i}
	}
	for _, o := range opts {
		o(ns)
	}
	return ns
}

func busy(ords ...int) func([]Node) {
	return func(ns []Node) {
		for _, o := range ords {
			ns[o].Busy = true
		}
	}
}

func protected(ords ...int) func([]Node) {
	return func(ns []Node) {
		for _, o := range ords {
			ns[o].Protected = true
		}
	}
}

func marked(at time.Time, ords ...int) func([]Node) {
	return func(ns []Node) {
		for _, o := range ords {
			ns[o].MarkedAt = at
		}
	}
}

func TestNext(t *testing.T) {
	tests := []struct {
		name   string
		nodes  []Node
		target int
		now    time.Time
		delay  time.Duration
		want   Plan
	}{
		{"at target, nothing marked: none", pool(3), 3, t0, delay, Plan{}},
		{"empty pool: none", nil, 0, t0, delay, Plan{}},
		{"mark the excess, highest ordinal first", pool(5), 3, t0, delay,
			Plan{Mark, []string{"n4", "n3"}}},
		{"busy nodes are never marked", pool(5, busy(4, 3)), 3, t0, delay,
			Plan{Mark, []string{"n2", "n1"}}},
		{"protected nodes are never marked", pool(3, protected(0)), 0, t0, delay,
			Plan{Mark, []string{"n2", "n1"}}},
		{"mark only what the existing marks leave", pool(5, marked(t0.Add(-time.Minute), 4)), 2, t0, delay,
			Plan{Mark, []string{"n3", "n2"}}},
		{"fewer empty nodes than the excess: mark them all", pool(4, busy(0, 1, 3)), 0, t0, delay,
			Plan{Mark, []string{"n2"}}},
		{"every node busy: none", pool(3, busy(0, 1, 2)), 0, t0, delay, Plan{}},
		{"marks equal the excess, none due: none", pool(4, marked(t0.Add(-time.Minute), 3)), 3, t0, delay, Plan{}},
		{"delete due marks, highest ordinal first", pool(5, marked(t0.Add(-delay), 3, 4)), 3, t0, delay,
			Plan{Delete, []string{"n4", "n3"}}},
		{"delay boundary: one nanosecond early keeps the node", pool(4, marked(t0.Add(-delay+time.Nanosecond), 3)), 3, t0, delay,
			Plan{}},
		{"delay boundary: exactly MarkedAt+delay deletes", pool(4, marked(t0.Add(-delay), 3)), 3, t0, delay,
			Plan{Delete, []string{"n3"}}},
		{"only due marks are deleted", pool(5, marked(t0.Add(-delay), 4), marked(t0.Add(-time.Minute), 3)), 3, t0, delay,
			Plan{Delete, []string{"n4"}}},
		{"deleting a due mark comes before marking more", pool(5, marked(t0.Add(-delay), 4)), 2, t0, delay,
			Plan{Delete, []string{"n4"}}},
		{"zero delay deletes at the mark's own time", pool(3, marked(t0, 2)), 2, t0, 0,
			Plan{Delete, []string{"n2"}}},
		{"busy marked node is unmarked, even when due", pool(4, marked(t0.Add(-delay), 3), busy(3)), 3, t0, delay,
			Plan{Unmark, []string{"n3"}}},
		{"busy marked node is unmarked before due marks are deleted",
			pool(5, marked(t0.Add(-delay), 3, 4), busy(3)), 3, t0, delay,
			Plan{Unmark, []string{"n3"}}},
		{"protected marked node is unmarked, never deleted", pool(3, marked(t0.Add(-delay), 0), protected(0)), 0, t0, delay,
			Plan{Unmark, []string{"n0"}}},
		{"marks beyond the excess: newest first",
			pool(5, marked(t0.Add(-5*time.Minute), 4), marked(t0.Add(-time.Minute), 3), marked(t0.Add(-3*time.Minute), 2)),
			4, t0, delay, Plan{Unmark, []string{"n3", "n2"}}},
		{"marks beyond the excess, same age: lowest ordinal first", pool(5, marked(t0.Add(-time.Minute), 2, 3, 4)), 3, t0, delay,
			Plan{Unmark, []string{"n2"}}},
		{"marks beyond the excess are unmarked even when due", pool(4, marked(t0.Add(-delay), 2, 3)), 3, t0, delay,
			Plan{Unmark, []string{"n2"}}},
		{"busy and surplus marks go in one unmark", pool(5, marked(t0.Add(-2*time.Minute), 2), marked(t0.Add(-time.Minute), 3, 4), busy(4)),
			4, t0, delay, Plan{Unmark, []string{"n4", "n3"}}},
		{"growing pool: every mark is removed", pool(3, marked(t0.Add(-delay), 1, 2)), 5, t0, delay,
			Plan{Unmark, []string{"n1", "n2"}}},
		{"growing pool without marks: none", pool(3), 5, t0, delay, Plan{}},
		{"negative target counts as zero", pool(2), -3, t0, delay, Plan{Mark, []string{"n1", "n0"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.nodes)
			got := Next(tt.nodes, tt.target, tt.now, tt.delay)
			if got.Action != tt.want.Action || !slices.Equal(got.IDs, tt.want.IDs) {
				t.Errorf("Next = %v %v, want %v %v", got.Action, got.IDs, tt.want.Action, tt.want.IDs)
			}
			if !slices.Equal(before, tt.nodes) {
				t.Errorf("Next modified its input: %v, was %v", tt.nodes, before)
			}
		})
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{None: "none", Mark: "mark", Unmark: "unmark", Delete: "delete"} {
		if got := a.String(); got != want {
			t.Errorf("Action(%d).String() = %q, want %q", a, got, want)
		}
	}
}

// TestNextConverges drives Next on random pools, applying each plan, and
// checks on every step that no busy, protected or unmarked node is deleted,
// no busy, protected or already marked node is marked, every delete is due,
// and the loop reaches max(target, busy-or-protected nodes) nodes.
func TestNextConverges(t *testing.T) {
	const seed = 7
	rng := rand.New(rand.NewPCG(seed, seed))
	for iter := range 2000 {
		n := rng.IntN(12)
		nodes := pool(n)
		stuck := 0
		for i := range nodes {
			nodes[i].Busy = rng.IntN(3) == 0
			nodes[i].Protected = i == 0 && rng.IntN(2) == 0
			if rng.IntN(3) == 0 {
				nodes[i].MarkedAt = t0.Add(-time.Duration(rng.IntN(20)) * time.Minute)
			}
			if nodes[i].Busy || nodes[i].Protected {
				stuck++
			}
		}
		target := rng.IntN(14) - 1
		now := t0
		for step := 0; ; step++ {
			if step > 4*n+4 {
				t.Fatalf("seed %d iter %d: no convergence after %d steps: %+v target %d", seed, iter, step, nodes, target)
			}
			plan := Next(nodes, target, now, delay)
			byID := map[string]*Node{}
			for i := range nodes {
				byID[nodes[i].ID] = &nodes[i]
			}
			for _, id := range plan.IDs {
				nd := byID[id]
				if nd == nil {
					t.Fatalf("seed %d iter %d: plan names unknown node %s", seed, iter, id)
				}
				switch plan.Action {
				case Mark:
					if nd.Busy || nd.Protected || !nd.MarkedAt.IsZero() {
						t.Fatalf("seed %d iter %d: marked %+v", seed, iter, *nd)
					}
					nd.MarkedAt = now
				case Unmark:
					if nd.MarkedAt.IsZero() {
						t.Fatalf("seed %d iter %d: unmarked unmarked node %+v", seed, iter, *nd)
					}
					nd.MarkedAt = time.Time{}
				case Delete:
					if nd.Busy || nd.Protected || nd.MarkedAt.IsZero() || now.Before(nd.MarkedAt.Add(delay)) {
						t.Fatalf("seed %d iter %d: deleted %+v at %v", seed, iter, *nd, now)
					}
				}
			}
			if plan.Action == Delete {
				nodes = slices.DeleteFunc(nodes, func(x Node) bool { return slices.Contains(plan.IDs, x.ID) })
			}
			if plan.Action == None {
				if want := max(target, stuck, 0); len(nodes) > want {
					// Waiting on the delay is the only reason to stop above target.
					now = now.Add(delay)
					if Next(nodes, target, now, delay).Action == None {
						t.Fatalf("seed %d iter %d: stuck at %d nodes, want %d: %+v", seed, iter, len(nodes), want, nodes)
					}
					continue
				}
				break
			}
		}
	}
}
