package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/consolidate"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func nodes(n int, f func(i int, nd *Node)) []Node {
	out := make([]Node, n)
	for i := range out {
		out[i] = Node{ID: i, Machine: fmt.Sprintf("p-%d-%d", i, i+1), CreatedAt: t0.Add(-time.Hour)}
		if f != nil {
			f(i, &out[i])
		}
	}
	return out
}

func budget(n int) consolidate.Config {
	return consolidate.Config{Budgets: []consolidate.Budget{{Nodes: n}}}
}

// summary writes a decision as "repair 1, drift 2 | drift 3" (replaced | waiting) for tables.
func summary(d Decision) string {
	var r, w []string
	for _, x := range d.Replace {
		r = append(r, fmt.Sprintf("%s %d", x.Reason, x.ID))
	}
	for _, x := range d.Waits {
		w = append(w, fmt.Sprintf("%s %d", x.Reason, x.ID))
	}
	return strings.Join(r, ", ") + " | " + strings.Join(w, ", ")
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		in      Input
		want    string
		breaker bool
		why     string // a word the first wait or replacement says
	}{
		{name: "healthy pool: nothing", cfg: Config{RepairAfter: time.Minute}, in: Input{Now: t0, Nodes: nodes(3, nil)}, want: " | "},
		{name: "unhealthy, not yet due: waits", cfg: Config{RepairAfter: 5 * time.Minute, MaxUnhealthyPercent: 50},
			in: Input{Now: t0, Nodes: nodes(2, func(i int, n *Node) {
				if i == 1 {
					n.Unhealthy, n.UnhealthySince = "worker OFFLINE", t0.Add(-time.Minute)
				}
			})}, want: " | repair 1", why: "repaired at 2026-05-01T12:04:00Z"},
		{name: "unhealthy past repair_after: repaired, whatever runs there and whatever the budget",
			cfg: Config{RepairAfter: 5 * time.Minute, Disruption: budget(0)},
			in: Input{Now: t0, Nodes: nodes(5, func(i int, n *Node) {
				if i == 3 {
					n.Unhealthy, n.UnhealthySince, n.Blocked = "worker OFFLINE", t0.Add(-6*time.Minute), "non-restartable work"
				}
			})}, want: "repair 3 | ", why: "longer than repair_after"},
		{name: "breaker: 50 % unhealthy repairs none", cfg: Config{RepairAfter: time.Minute},
			in: Input{Now: t0, Nodes: nodes(4, func(i int, n *Node) {
				if i%2 == 0 {
					n.Unhealthy, n.UnhealthySince = "worker OFFLINE", t0.Add(-time.Hour)
				}
			})}, want: " | repair-breaker 0, repair-breaker 2", breaker: true, why: "more than the 20% breaker allows (1)"},
		{name: "breaker: exactly at the share still repairs", cfg: Config{RepairAfter: time.Minute},
			in: Input{Now: t0, Nodes: nodes(10, func(i int, n *Node) {
				if i >= 8 {
					n.Unhealthy, n.UnhealthySince = "NotReady", t0.Add(-time.Hour)
				}
			})}, want: "repair 8, repair 9 | "},
		{name: "breaker: rounded up, one node of a small pool is repaired", cfg: Config{RepairAfter: time.Minute},
			in: Input{Now: t0, Nodes: nodes(3, func(i int, n *Node) {
				if i == 1 {
					n.Unhealthy, n.UnhealthySince = "NotReady", t0.Add(-time.Hour)
				}
			})}, want: "repair 1 | "},
		{name: "breaker: the healthy nodes left out still count (Total)", cfg: Config{RepairAfter: time.Minute},
			in: Input{Now: t0, Total: 10, Nodes: nodes(3, func(i int, n *Node) {
				n.Unhealthy, n.UnhealthySince = "NotReady", t0.Add(-time.Hour)
			})}, want: " | repair-breaker 0, repair-breaker 1, repair-breaker 2", breaker: true, why: "3 of 10 nodes"},
		{name: "repair off: unhealthy nodes stay", cfg: Config{},
			in: Input{Now: t0, Nodes: nodes(5, func(i int, n *Node) {
				n.Unhealthy, n.UnhealthySince = "NotReady", t0.Add(-time.Hour)
			})}, want: " | "},
		{name: "drift under a budget of 1: one at a time", cfg: Config{Disruption: budget(1)},
			in:   Input{Now: t0, Nodes: nodes(3, func(i int, n *Node) { n.Drift = "offering m8 changed" })},
			want: "drift 0 | drift 1, drift 2", why: "drifted: offering m8 changed"},
		{name: "drift: a node already being replaced fills the budget", cfg: Config{Disruption: budget(1)},
			in: Input{Now: t0, Nodes: nodes(3, func(i int, n *Node) {
				n.Drift = "labels changed"
				n.Replacing = i == 0
			})}, want: " | drift 1, drift 2", why: "waits for the disruption budget (1 of 1 being disrupted"},
		{name: "drift: other disruption counts", cfg: Config{Disruption: budget(2)},
			in:   Input{Now: t0, Disrupting: 1, Nodes: nodes(3, func(i int, n *Node) { n.Drift = "x" })},
			want: "drift 0 | drift 1, drift 2"},
		{name: "drift waits for non-restartable work, the next one goes", cfg: Config{Disruption: budget(1)},
			in: Input{Now: t0, Nodes: nodes(2, func(i int, n *Node) {
				n.Drift = "x"
				if i == 0 {
					n.Blocked = "non-restartable work"
				}
			})}, want: "drift 1 | drift 0", why: "waits: non-restartable work runs there"},
		{name: "default budget: 10 % rounded up", cfg: Config{},
			in:   Input{Now: t0, Nodes: nodes(12, func(i int, n *Node) { n.Drift = "x" })},
			want: "drift 0, drift 1 | drift 2, drift 3, drift 4, drift 5, drift 6, drift 7, drift 8, drift 9, drift 10, drift 11"},
		{name: "expiry: oldest first, after drift", cfg: Config{ExpireAfter: 24 * time.Hour, Disruption: budget(2)},
			in: Input{Now: t0, Nodes: nodes(4, func(i int, n *Node) {
				n.CreatedAt = t0.Add(-time.Duration(25+i) * time.Hour)
				if i == 1 {
					n.Drift = "x"
				}
				if i == 0 {
					n.CreatedAt = t0.Add(-time.Hour)
				}
			})}, want: "drift 1, expired 3 | expired 2", why: "drifted"},
		{name: "expiry: a closed window holds everything", cfg: Config{ExpireAfter: time.Hour, Disruption: consolidate.Config{
			Budgets: []consolidate.Budget{{Nodes: 5, Windows: []consolidate.Window{{Start: 2 * time.Hour, Duration: time.Hour}}}}}},
			in: Input{Now: t0, Nodes: nodes(2, nil)}, want: " | expired 0, expired 1", why: "closed"},
		{name: "the protected first node waits for ever, and takes no budget", cfg: Config{Disruption: budget(1)},
			in: Input{Now: t0, Nodes: nodes(2, func(i int, n *Node) {
				n.Drift = "x"
				n.Protected = i == 0
			})}, want: "drift 1 | drift 0", why: "protected first node"},
		{name: "unhealthy nodes are not drift candidates", cfg: Config{Disruption: budget(5)},
			in: Input{Now: t0, Nodes: nodes(2, func(i int, n *Node) {
				n.Drift = "x"
				n.Unhealthy, n.UnhealthySince = "NotReady", t0
			})}, want: " | "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.cfg, tc.in)
			if got := summary(d); got != tc.want {
				t.Fatalf("decision %q, want %q\n%+v", got, tc.want, d)
			}
			if (d.Breaker != "") != tc.breaker {
				t.Fatalf("breaker %q, want set=%v", d.Breaker, tc.breaker)
			}
			if tc.why != "" {
				var text []string
				for _, r := range d.Replace {
					text = append(text, r.Why)
				}
				for _, w := range d.Waits {
					text = append(text, w.Why)
				}
				if !strings.Contains(strings.Join(text, "\n"), tc.why) {
					t.Fatalf("no reason says %q:\n%s", tc.why, strings.Join(text, "\n"))
				}
			}
		})
	}
}

// TestDecideIsPure: the same input gives the same decision, and the input
// is not changed.
func TestDecideIsPure(t *testing.T) {
	in := Input{Now: t0, Nodes: nodes(6, func(i int, n *Node) {
		n.Drift = "x"
		n.ID = 5 - i
	})}
	before := fmt.Sprint(in.Nodes)
	a, b := Decide(Config{}, in), Decide(Config{}, in)
	if summary(a) != summary(b) || fmt.Sprint(in.Nodes) != before {
		t.Fatalf("not deterministic or input changed: %q vs %q", summary(a), summary(b))
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{{RepairAfter: -1}, {ExpireAfter: -1}, {MaxUnhealthyPercent: 101}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (Config{RepairAfter: time.Minute, MaxUnhealthyPercent: 50}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestReplaceWithCheaper: a node is swapped for the cheapest offering that
// hosts its work when the saving over the horizon beats the work lost; an
// empty node, work that does not fit, a saving too small, work that may
// not move and the budget all keep it.
func TestReplaceWithCheaper(t *testing.T) {
	od := capacity.Offering{Type: "m8", Kind: capacity.OnDemand, Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 << 30}, PricePerHour: 0.40}
	sp := capacity.Offering{Type: "m8", Kind: capacity.Spot, Resources: od.Resources, PricePerHour: 0.12}
	small := capacity.Offering{Type: "m2", Kind: capacity.OnDemand, Resources: capacity.Resources{MilliCPU: 2000, Memory: 8 << 30}, PricePerHour: 0.10}
	cfg := Config{Offerings: []capacity.Offering{od, sp, small},
		Disruption: consolidate.Config{Enabled: true, Horizon: time.Hour, Budgets: []consolidate.Budget{{Nodes: 1}}}}
	node := func(used capacity.Resources, hours float64) Node {
		return Node{ID: 0, Machine: "p-0-1", Offering: od.Name(), Used: used, WorkHours: hours}
	}
	tests := []struct {
		name string
		cfg  Config
		n    Node
		want string // the offering replaced to, "" for none
	}{
		{"small work: the cheapest that hosts it", cfg, node(capacity.Resources{MilliCPU: 1000, Memory: 1 << 30}, 0.1), small.Name()},
		{"large work: spot", cfg, node(capacity.Resources{MilliCPU: 6000}, 0.1), sp.Name()},
		{"work worth more than the saving", cfg, node(capacity.Resources{MilliCPU: 6000}, 1), ""},
		{"an empty node is scale-down's", cfg, node(capacity.Resources{}, 0), ""},
		{"consolidation off", Config{Offerings: cfg.Offerings}, node(capacity.Resources{MilliCPU: 1000}, 0), ""},
		{"already the cheapest", cfg, Node{ID: 0, Machine: "p-0-1", Offering: small.Name(), Used: capacity.Resources{MilliCPU: 1000}}, ""},
		{"blocked work", cfg, func() Node {
			n := node(capacity.Resources{MilliCPU: 1000}, 0)
			n.Blocked = "non-restartable work"
			return n
		}(), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.cfg, Input{Now: t0, Nodes: []Node{tc.n}})
			got := ""
			if len(d.Replace) == 1 {
				if d.Replace[0].Reason != ReasonReplace {
					t.Fatalf("reason %s", d.Replace[0].Reason)
				}
				got = d.Replace[0].Offering
				if !strings.Contains(d.Replace[0].Why, "saves $") || !strings.Contains(d.Replace[0].Why, "loses $") {
					t.Fatalf("why %q does not weigh the saving against the work lost", d.Replace[0].Why)
				}
			}
			if got != tc.want {
				t.Fatalf("replaced to %q, want %q: %+v", got, tc.want, d)
			}
		})
	}
	// The budget: two candidates, one goes.
	two := []Node{node(capacity.Resources{MilliCPU: 1000}, 0), node(capacity.Resources{MilliCPU: 1000}, 0)}
	two[1].ID, two[1].Machine = 1, "p-1-2"
	if got := summary(Decide(cfg, Input{Now: t0, Nodes: two})); got != "replace 0 | replace 1" {
		t.Fatalf("budget of 1: %q", got)
	}
}
