package consolidate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

var noon = time.Date(2026, 5, 6, 12, 0, 0, 0, time.UTC)

// node8 is an 8-core node at $1/h running the given instances.
func node8(id string, ord int, ins ...Instance) Node {
	return Node{ID: id, Ordinal: ord, Capacity: capacity.Resources{MilliCPU: 8000, Memory: 32 << 30},
		PricePerHour: 1, Instances: ins}
}

// cores is an instance of n cores started ago before noon.
func cores(id string, n int64, restartable bool, ago time.Duration) Instance {
	return Instance{ID: id, Requests: capacity.Resources{MilliCPU: n * 1000, Memory: n << 30},
		Restartable: restartable, StartedAt: noon.Add(-ago)}
}

func on(c Config) Config {
	c.Enabled = true
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

func TestDecide(t *testing.T) {
	// A node at 25 % running restartable work, a busy node with room, a
	// full node: the first moves onto the second.
	base := func() []Node {
		return []Node{
			node8("a", 0, cores("a1", 2, true, 10*time.Minute)),
			node8("b", 1, cores("b1", 4, false, time.Hour)),
			node8("c", 2, cores("c1", 8, false, time.Hour)),
		}
	}
	night := Budget{Nodes: 1, Windows: []Window{{Start: 22 * time.Hour, Duration: 8 * time.Hour}}}
	tests := []struct {
		name  string
		cfg   Config
		in    func() Input
		moves []string // node ids moved
		why   string   // in Reason
	}{
		{"off", Config{}, func() Input { return Input{Now: noon, Nodes: base()} }, nil, "off"},
		{"under-used restartable node moves", on(Config{}), func() Input { return Input{Now: noon, Nodes: base()} }, []string{"a"}, ""},
		{"non-restartable work stays", on(Config{}), func() Input {
			n := base()
			n[0].Instances = append(n[0].Instances, cores("a2", 1, false, time.Minute))
			return Input{Now: noon, Nodes: n}
		}, nil, "3 non-restartable work"},
		{"do-not-disrupt stays", on(Config{}), func() Input {
			n := base()
			n[0].Instances[0].DoNotDisrupt = true
			return Input{Now: noon, Nodes: n}
		}, nil, "1 do-not-disrupt"},
		{"moved work stays", on(Config{}), func() Input {
			n := base()
			n[0].Instances[0].Moved = true
			return Input{Now: noon, Nodes: n}
		}, nil, "1 work moved before"},
		{"daemons do not block and do not move", on(Config{}), func() Input {
			n := base()
			n[0].Instances = append(n[0].Instances, Instance{ID: "d", Requests: capacity.Resources{MilliCPU: 100}, Daemon: true})
			return Input{Now: noon, Nodes: n}
		}, []string{"a"}, ""},
		{"no room elsewhere", on(Config{}), func() Input {
			n := base()
			n[1].Instances = append(n[1].Instances, cores("b2", 3, false, time.Hour))
			return Input{Now: noon, Nodes: n}
		}, nil, "fits no other node"},
		{"empty nodes are no destination", on(Config{}), func() Input {
			n := base()
			n[1].Instances = nil
			return Input{Now: noon, Nodes: n}
		}, nil, "fits no other node"},
		{"lost work outweighs the saving", on(Config{Horizon: 30 * time.Minute}), func() Input {
			n := base()
			n[0].Instances[0].StartedAt = noon.Add(-3 * time.Hour) // 3 h × 25 % × $1 = $0.75 > $0.50
			return Input{Now: noon, Nodes: n}
		}, nil, "does not outweigh"},
		{"saving outweighs the lost work", on(Config{Horizon: time.Hour}), func() Input {
			n := base()
			n[0].Instances[0].StartedAt = noon.Add(-3 * time.Hour) // $0.75 < $1
			return Input{Now: noon, Nodes: n}
		}, []string{"a"}, ""},
		{"karpenter ignores lost work", Karpenter(), func() Input {
			n := base()
			n[0].Instances[0].StartedAt = noon.Add(-100 * time.Hour)
			return Input{Now: noon, Nodes: n}
		}, []string{"a"}, ""},
		{"above max utilization", on(Config{MaxUtilization: 20}), func() Input { return Input{Now: noon, Nodes: base()} }, nil, "above max_utilization"},
		{"protected first node", on(Config{}), func() Input {
			n := base()
			n[0].Protected = true
			return Input{Now: noon, Nodes: n}
		}, nil, "protected"},
		{"cordoned node is left alone", on(Config{}), func() Input {
			n := base()
			n[0].Cordoned = true
			return Input{Now: noon, Nodes: n}
		}, nil, "no under-used node"},
		{"pending work keeps the free space", on(Config{}), func() Input { return Input{Now: noon, Nodes: base(), Pending: 1} }, nil, "wait for capacity"},
		{"floor", on(Config{}), func() Input { return Input{Now: noon, Nodes: base(), MinNodes: 3} }, nil, "floor of 3"},
		{"budget of zero", on(Config{Budgets: []Budget{{Nodes: 0}}}), func() Input { return Input{Now: noon, Nodes: base()} }, nil, "budget exhausted"},
		{"budget used by a drain in progress", on(Config{Budgets: []Budget{{Nodes: 1}}}), func() Input {
			return Input{Now: noon, Nodes: base(), Disrupting: 1}
		}, nil, "budget exhausted"},
		{"budget of one among two candidates", on(Config{Budgets: []Budget{{Nodes: 1}}}), func() Input {
			n := base()
			n = append(n, node8("d", 3, cores("d1", 1, true, time.Minute)))
			return Input{Now: noon, Nodes: n}
		}, []string{"d"}, "budget allows 1"},
		{"10 % of 4 nodes rounds up to 1", on(Config{}), func() Input {
			n := base()
			n = append(n, node8("d", 3, cores("d1", 1, true, time.Minute)))
			return Input{Now: noon, Nodes: n}
		}, []string{"d"}, "budget allows 1"},
		{"most restrictive budget wins", on(Config{Budgets: []Budget{{Nodes: 5}, {Percent: 0, Percentage: true}}}), func() Input {
			return Input{Now: noon, Nodes: base()}
		}, nil, "budget exhausted"},
		{"window closed at noon", on(Config{Budgets: []Budget{night}}), func() Input { return Input{Now: noon, Nodes: base()} }, nil, "budget 1 in 22:00+8h0m0s: closed"},
		{"window open at 23:00", on(Config{Budgets: []Budget{night}}), func() Input {
			n := base()
			n[0].Instances[0].StartedAt = noon.Add(11*time.Hour - 10*time.Minute)
			return Input{Now: noon.Add(11 * time.Hour), Nodes: n}
		}, []string{"a"}, ""},
		{"window open past midnight", on(Config{Budgets: []Budget{night}}), func() Input {
			n := base()
			n[0].Instances[0].StartedAt = noon.Add(17*time.Hour - 10*time.Minute)
			return Input{Now: noon.Add(17 * time.Hour), Nodes: n}
		}, []string{"a"}, ""},
		{"free space counted once", on(Config{Budgets: []Budget{{Nodes: 5}}}), func() Input {
			// a and d (2 cores each) each fit b's 4 free cores, not both
			// with e's 2 cores too.
			n := base()
			n = append(n, node8("d", 3, cores("d1", 2, true, 20*time.Minute)), node8("e", 4, cores("e1", 3, true, 30*time.Minute)))
			return Input{Now: noon, Nodes: n}
		}, []string{"a", "d"}, "fits no other node"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.cfg, tc.in())
			var got []string
			for _, m := range d.Moves {
				got = append(got, m.Node)
				if m.Saving <= 0 || len(m.Instances) == 0 || m.String() == "" {
					t.Errorf("move %+v lacks its saving or instances", m)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.moves, ",") {
				t.Fatalf("moves %v, want %v (reason %q)", got, tc.moves, d.Reason)
			}
			if !strings.Contains(d.Reason, tc.why) {
				t.Fatalf("reason %q, want it to mention %q", d.Reason, tc.why)
			}
		})
	}
}

// TestMoveFigures checks the saving and lost work of one move.
func TestMoveFigures(t *testing.T) {
	nodes := []Node{
		node8("a", 0, cores("a1", 2, true, 2*time.Hour), cores("a2", 2, true, 0)),
		node8("b", 1, cores("b1", 1, false, time.Hour)),
	}
	nodes[0].PricePerHour, nodes[1].PricePerHour = 4, 4
	d := Decide(on(Config{Horizon: 2 * time.Hour}), Input{Now: noon, Nodes: nodes})
	if len(d.Moves) != 1 {
		t.Fatalf("moves %+v (%s)", d.Moves, d.Reason)
	}
	m := d.Moves[0]
	// Saving $4 × 2 h; lost: a1 ran 2 h holding 25 % of a $4 node = $2.
	if m.Saving != 8 || m.LostWork != 2 || m.LostHours != 2 || m.Utilization != 50 ||
		strings.Join(m.Instances, ",") != "a1,a2" || m.Count != 2 {
		t.Fatalf("move %+v", m)
	}
}

// TestCountedEntries: an entry standing for several instances packs as
// that many and loses that many times the work.
func TestCountedEntries(t *testing.T) {
	g := cores("g", 1, true, time.Hour)
	g.Count = 3
	nodes := []Node{node8("a", 0, g), node8("b", 1, cores("b1", 4, false, time.Hour))}
	d := Decide(on(Config{Horizon: 4 * time.Hour}), Input{Now: noon, Nodes: nodes})
	if len(d.Moves) != 1 || d.Moves[0].Count != 3 || d.Moves[0].LostHours != 3 {
		t.Fatalf("moves %+v (%s)", d.Moves, d.Reason)
	}
	g.Count = 5 // 5 cores do not fit b's 4 free ones
	nodes[0].Instances[0] = g
	if d := Decide(on(Config{Horizon: 4 * time.Hour, MaxUtilization: 100}), Input{Now: noon, Nodes: nodes}); len(d.Moves) != 0 ||
		!strings.Contains(d.Reason, "fits no other node") {
		t.Fatalf("5 instances of a core moved into 4 free cores: %+v (%s)", d.Moves, d.Reason)
	}
}

// TestNoMoveOntoAMovedNode: work planned onto a node keeps that node: it
// is not emptied in the same decision (its planned work would have no
// home).
func TestNoMoveOntoAMovedNode(t *testing.T) {
	nodes := []Node{
		node8("a", 0, cores("a1", 1, true, time.Minute)),
		node8("b", 1, cores("b1", 2, true, 2*time.Minute)),
	}
	d := Decide(on(Config{Budgets: []Budget{{Nodes: 2}}}), Input{Now: noon, Nodes: nodes})
	if len(d.Moves) != 1 || d.Moves[0].Node != "a" {
		t.Fatalf("moves %+v, want a onto b only (%s)", d.Moves, d.Reason)
	}
}

// TestMoveTargets: a move names where its work goes, the fullest
// destinations first, an entry of several instances split where one node
// cannot take them all; the targets account for every moved instance and
// respect each destination's free space.
func TestMoveTargets(t *testing.T) {
	g := cores("g", 1, true, time.Minute)
	g.Count = 3
	nodes := []Node{
		node8("a", 0, g, cores("a2", 1, true, time.Minute)),
		node8("half", 1, cores("h1", 4, false, time.Hour)),  // 4 free
		node8("full", 2, cores("f1", 6, false, time.Hour)),  // 2 free
		node8("light", 3, cores("l1", 5, false, time.Hour)), // 3 free
	}
	d := Decide(on(Config{MaxUtilization: 50}), Input{Now: noon, Nodes: nodes})
	if len(d.Moves) != 1 || d.Moves[0].Node != "a" {
		t.Fatalf("moves %+v (%s)", d.Moves, d.Reason)
	}
	var got []string
	per := map[string]int{}
	for _, tg := range d.Moves[0].Targets {
		got = append(got, fmt.Sprintf("%s:%d@%s", tg.Instance, tg.Count, tg.Node))
		per[tg.Instance] += tg.Count
	}
	// Fullest first: "full" (6 of 8 used) takes 2, then "light" (5 used)
	// takes the rest; "half" is not needed.
	if want := "g:2@full,g:1@light,a2:1@light"; strings.Join(got, ",") != want {
		t.Fatalf("targets %v, want %s", got, want)
	}
	if per["g"] != 3 || per["a2"] != 1 {
		t.Fatalf("targets cover %v, want g:3 a2:1", per)
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.MaxUtilization != 50 || c.Horizon != 15*time.Minute || c.Every != time.Minute || len(c.Budgets) != 1 ||
		c.Budgets[0].String() != "10%" {
		t.Fatalf("defaults %+v", c)
	}
	bad := Config{MaxUtilization: 101, Horizon: -1, Budgets: []Budget{{Nodes: -1},
		{Percent: 5, Percentage: true, Windows: []Window{{Start: 25 * time.Hour, Duration: 0}}}}}
	err := bad.Validate()
	for _, want := range []string{"max_utilization", "horizon", "budgets[0].nodes", "budgets[1].windows[0].start", "budgets[1].windows[0].duration"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	for in, want := range map[string]string{"10%": "10%", "3": "3", " 0 ": "0"} {
		b, err := ParseNodes(in)
		if err != nil || b.String() != want {
			t.Errorf("ParseNodes(%q) = %v, %v", in, b, err)
		}
	}
	for _, in := range []string{"", "x", "-1", "101%", "5.5%"} {
		if _, err := ParseNodes(in); err == nil {
			t.Errorf("ParseNodes(%q) accepted", in)
		}
	}
	if d, err := ParseClock("22:30"); err != nil || d != 22*time.Hour+30*time.Minute {
		t.Errorf("ParseClock = %v, %v", d, err)
	}
	if _, err := ParseClock("25:00"); err == nil {
		t.Error("ParseClock(25:00) accepted")
	}
}
