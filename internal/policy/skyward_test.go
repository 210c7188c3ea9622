package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

var skyT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// skyConfig is a skyward pool with the seed's knobs: cooldown 30s, idle
// timeout 60s. It does not call Validate, so a zero slots stays zero.
func skyConfig(spec capacity.NodeSpec, slots int) Config {
	return Config{Policy: Skyward, Nodes: spec, Cooldown: 30 * time.Second, IdleTimeout: 60 * time.Second, SlotsPerNode: slots}
}

// skyPressure returns nodes n0..n{nodes-1}, each running a daemon, with
// inflight instances spread round-robin over them and queued instances waiting.
func skyPressure(nodes, inflight, queued int) capacity.Pressure {
	var p capacity.Pressure
	for i := range nodes {
		p.Nodes = append(p.Nodes, capacity.Node{ID: fmt.Sprintf("n%d", i), Ordinal: i,
			Running: []capacity.Instance{{Requests: capacity.CPU(100), Daemon: true}}})
	}
	for i := range inflight {
		n := &p.Nodes[i%nodes]
		n.Running = append(n.Running, capacity.Instance{Requests: capacity.CPU(1000)})
	}
	if queued > 0 {
		p.Pending = []capacity.Pending{{Requests: capacity.CPU(1000), Count: queued}}
	}
	return p
}

func TestSkywardDecide(t *testing.T) {
	elastic := capacity.Elastic(2, 6)
	ago := func(d time.Duration) time.Time { return skyT0.Add(-d) }
	busyNow := State{LastBusy: skyT0}
	tests := []struct {
		name                        string
		spec                        capacity.NodeSpec
		slots                       int
		desired                     int
		nodes, inflight, queued     int
		state                       State
		want                        int
		code                        string
		wantLastScale, wantLastBusy time.Time
	}{
		// Ports of Skyward's tests/actors/test_autoscaler.py (_compute_desired
		// and scale-to-zero), under seed 000's tree.
		{name: "zero nodes, no work past the idle timeout: min", spec: capacity.Elastic(1, 6), slots: 2, desired: 3,
			state: State{LastBusy: ago(61 * time.Second)}, want: 1, code: CodeIdle,
			wantLastScale: skyT0, wantLastBusy: ago(61 * time.Second)},
		{name: "queued scale-up: nodes + ceil(queued/slots)", spec: elastic, slots: 2, desired: 2,
			nodes: 2, inflight: 4, queued: 3, want: 4, code: CodeScaleUp, wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "queued scale-up respects max", spec: elastic, slots: 2, desired: 4,
			nodes: 4, inflight: 8, queued: 12, want: 6, code: CodeAtMax, wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "steady state", spec: elastic, slots: 2, desired: 4, nodes: 4, inflight: 4, state: busyNow,
			want: 4, code: CodeSteady, wantLastBusy: skyT0},
		{name: "zero slots count as one", spec: elastic, slots: 0, desired: 2, nodes: 2, inflight: 2, queued: 3,
			want: 5, code: CodeScaleUp, wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "scale to zero: idle with zero nodes", spec: capacity.Elastic(0, 5), slots: 1, desired: 2,
			state: State{LastBusy: ago(2 * time.Minute)}, want: 0, code: CodeIdle,
			wantLastScale: skyT0, wantLastBusy: ago(2 * time.Minute)},
		{name: "scale to zero: queued with zero nodes wakes", spec: capacity.Elastic(0, 5), slots: 2, desired: 0,
			queued: 1, state: State{LastBusy: ago(time.Hour)}, want: 1, code: CodeScaleUp,
			wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "scale to zero: wake ignores a running cooldown", spec: capacity.Elastic(0, 5), slots: 1, desired: 0,
			queued: 2, state: State{LastScale: ago(time.Second)}, want: 2, code: CodeScaleUp,
			wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "scale to zero: idle with nodes keeps them within the idle timeout", spec: capacity.Elastic(0, 5), slots: 1,
			desired: 2, nodes: 2, state: State{LastBusy: ago(30 * time.Second)}, want: 2, code: CodeSteady,
			wantLastBusy: ago(30 * time.Second)},
		{name: "scale to zero: wake respects max", spec: capacity.Elastic(0, 3), slots: 1, desired: 0, queued: 20,
			want: 3, code: CodeAtMax, wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "a lowered max caps queued work", spec: elastic, slots: 2, desired: 8, nodes: 8, inflight: 16, queued: 4,
			want: 6, code: CodeAtMax, wantLastScale: skyT0, wantLastBusy: skyT0},

		// Edge cases of the tree.
		{name: "max reached: already at max", spec: elastic, slots: 2, desired: 6, nodes: 6, inflight: 12, queued: 5,
			want: 6, code: CodeAtMax, wantLastBusy: skyT0},
		{name: "queue already covered by desired (nodes booting)", spec: elastic, slots: 2, desired: 6, nodes: 4,
			inflight: 8, queued: 2, want: 6, code: CodeSteady, wantLastBusy: skyT0},
		{name: "min = max: queue cannot grow the pool", spec: capacity.Fixed(3), slots: 1, desired: 3, nodes: 3,
			inflight: 3, queued: 10, want: 3, code: CodeAtMax, wantLastBusy: skyT0},
		{name: "min = max: idle cannot shrink the pool", spec: capacity.Fixed(3), slots: 1, desired: 3, nodes: 3,
			state: State{LastBusy: ago(time.Hour)}, want: 3, code: CodeAtMin, wantLastBusy: ago(time.Hour)},
		{name: "cooldown suppresses the idle scale-down", spec: elastic, slots: 2, desired: 6, nodes: 6,
			state: State{LastScale: ago(10 * time.Second), LastBusy: ago(2 * time.Minute)}, want: 6, code: CodeCooldown,
			wantLastScale: ago(10 * time.Second), wantLastBusy: ago(2 * time.Minute)},
		{name: "cooldown suppresses the low-utilization scale-down", spec: elastic, slots: 2, desired: 6, nodes: 6,
			inflight: 1, state: State{LastScale: ago(29 * time.Second)}, want: 6, code: CodeCooldown,
			wantLastScale: ago(29 * time.Second), wantLastBusy: skyT0},
		{name: "cooldown does not suppress scale-up", spec: elastic, slots: 2, desired: 3, nodes: 3, inflight: 6,
			queued: 2, state: State{LastScale: ago(time.Second)}, want: 4, code: CodeScaleUp,
			wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "cooldown boundary: exactly Cooldown ago has ended", spec: elastic, slots: 2, desired: 6, nodes: 6,
			state: State{LastScale: ago(30 * time.Second), LastBusy: ago(2 * time.Minute)}, want: 2, code: CodeIdle,
			wantLastScale: skyT0, wantLastBusy: ago(2 * time.Minute)},
		{name: "idle boundary: exactly IdleTimeout is not longer", spec: elastic, slots: 2, desired: 6, nodes: 6,
			state: State{LastBusy: ago(60 * time.Second)}, want: 6, code: CodeSteady, wantLastBusy: ago(60 * time.Second)},
		{name: "idle boundary: just past IdleTimeout releases to min", spec: elastic, slots: 2, desired: 6, nodes: 6,
			state: State{LastBusy: ago(60*time.Second + time.Nanosecond)}, want: 2, code: CodeIdle,
			wantLastScale: skyT0, wantLastBusy: ago(60*time.Second + time.Nanosecond)},
		{name: "idle at min already", spec: elastic, slots: 2, desired: 2, nodes: 2,
			state: State{LastBusy: ago(time.Hour)}, want: 2, code: CodeAtMin, wantLastBusy: ago(time.Hour)},
		{name: "first call: the idle period starts now", spec: elastic, slots: 2, desired: 6, nodes: 6,
			want: 6, code: CodeSteady, wantLastBusy: skyT0},
		{name: "daemons are not inflight", spec: elastic, slots: 2, desired: 4, nodes: 4,
			state: State{LastBusy: ago(2 * time.Minute)}, want: 2, code: CodeIdle,
			wantLastScale: skyT0, wantLastBusy: ago(2 * time.Minute)},
		{name: "low utilization shrinks to ceil(inflight/slots)+1", spec: elastic, slots: 2, desired: 6, nodes: 6,
			inflight: 3, want: 3, code: CodeScaleDown, wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "low utilization is floored at min", spec: elastic, slots: 2, desired: 6, nodes: 6, inflight: 1,
			want: 2, code: CodeScaleDown, wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "low utilization never raises desired", spec: capacity.Elastic(1, 6), slots: 2, desired: 2, nodes: 6,
			inflight: 3, want: 2, code: CodeSteady, wantLastBusy: skyT0},
		{name: "low utilization at min", spec: elastic, slots: 2, desired: 2, nodes: 6, inflight: 1,
			want: 2, code: CodeAtMin, wantLastBusy: skyT0},
		{name: "30% exactly is not low utilization", spec: capacity.Elastic(1, 6), slots: 2, desired: 5, nodes: 5,
			inflight: 3, want: 5, code: CodeSteady, wantLastBusy: skyT0},
		{name: "desired above a lowered max is clamped", spec: elastic, slots: 2, desired: 9, nodes: 9, inflight: 9,
			want: 6, code: CodeAtMax, wantLastScale: skyT0, wantLastBusy: skyT0},
		{name: "desired below a raised min is clamped", spec: elastic, slots: 2, desired: 1, nodes: 1, inflight: 2,
			want: 2, code: CodeAtMin, wantLastScale: skyT0, wantLastBusy: skyT0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewSkyward(skyConfig(tt.spec, tt.slots))
			got := p.Decide(Input{Now: skyT0, Desired: tt.desired,
				Pressure: skyPressure(tt.nodes, tt.inflight, tt.queued), State: tt.state})
			if got.Desired != tt.want || got.Reason.Code != tt.code {
				t.Errorf("Decide = %d (%v), want %d (%s)", got.Desired, got.Reason, tt.want, tt.code)
			}
			if !got.State.LastScale.Equal(tt.wantLastScale) || !got.State.LastBusy.Equal(tt.wantLastBusy) {
				t.Errorf("State = {LastScale %v LastBusy %v}, want {%v %v}",
					got.State.LastScale, got.State.LastBusy, tt.wantLastScale, tt.wantLastBusy)
			}
			if got.TargetTracking != nil || got.Utilization != nil || got.Tide != nil {
				t.Errorf("skyward filled another policy's figures: %+v", got)
			}
		})
	}
}

// TestSkywardSeedSequence replays the sequence diagram of seed 000: a pool
// {min 2, max 6} of 4 nodes with 2 slots each grows to 6 on 12 queued tasks,
// keeps its size while busy and in cooldown, then shrinks to 2 only after 60 s
// of idleness, detected by the timer tick replaying the last report.
func TestSkywardSeedSequence(t *testing.T) {
	p := NewSkyward(skyConfig(capacity.Elastic(2, 6), 2))
	idle := skyPressure(6, 0, 0)
	steps := []struct {
		what     string
		at       time.Duration
		pressure capacity.Pressure
		want     int
		code     string
		words    string
	}{
		{"PressureReport(queued=12, inflight=4, capacity=8)", 0, skyPressure(4, 4, 12), 6, CodeAtMax,
			"queued=12 inflight=4 capacity=8 nodes=4"},
		{"nodes 4 and 5 joined: PressureReport(queued=0, inflight=2, capacity=12)", 10 * time.Second,
			skyPressure(6, 2, 0), 6, CodeCooldown, "inflight=2 capacity=12 nodes=6"},
		{"tasks done: PressureReport(queued=0, inflight=0, capacity=12)", 20 * time.Second, idle, 6, CodeCooldown,
			"inflight=0 capacity=12 nodes=6"},
		{"tick replays the last report: idle 20s", 30 * time.Second, idle, 6, CodeSteady, "nodes=6"},
		{"tick replays the last report: idle 50s", 60 * time.Second, idle, 6, CodeSteady, "nodes=6"},
		{"tick replays the last report: idle 80s", 90 * time.Second, idle, 2, CodeIdle, "idle for 80s"},
		{"tick replays the last report: at min", 120 * time.Second, idle, 2, CodeAtMin, "already at min 2"},
	}
	desired, state := 4, State{}
	for _, s := range steps {
		d := p.Decide(Input{Now: skyT0.Add(s.at), Desired: desired, Pressure: s.pressure, State: state})
		if d.Desired != s.want || d.Reason.Code != s.code || !strings.Contains(d.Reason.String(), s.words) {
			t.Fatalf("t=%v %s: desired %d (%v), want %d (%s, containing %q)",
				s.at, s.what, d.Desired, d.Reason, s.want, s.code, s.words)
		}
		desired, state = d.Desired, d.State
	}
}

// TestSkywardIdleShrinksOnlyThroughReplay shows that the seed's timer tick is
// the caller replaying the last pressure with a later Now: the report that
// made the pool idle does not shrink it, evaluating it again at the same time
// does not either, and only a replay past the idle timeout does.
func TestSkywardIdleShrinksOnlyThroughReplay(t *testing.T) {
	p := NewSkyward(skyConfig(capacity.Elastic(1, 8), 1))
	busy := p.Decide(Input{Now: skyT0, Desired: 4, Pressure: skyPressure(4, 3, 0)})
	last := skyPressure(4, 0, 0)
	replays := []struct {
		at   time.Duration
		want int
	}{
		{1 * time.Second, 4},  // the report that made the pool idle
		{1 * time.Second, 4},  // the same report, the same time: nothing new
		{30 * time.Second, 4}, // first tick: idle 30s
		{60 * time.Second, 4}, // idle exactly 60s: not longer than the timeout
		{61 * time.Second, 1}, // tick past the idle timeout
	}
	desired, state := busy.Desired, busy.State
	for i, r := range replays {
		d := p.Decide(Input{Now: skyT0.Add(r.at), Desired: desired, Pressure: last, State: state})
		if d.Desired != r.want {
			t.Fatalf("replay %d at %v: desired %d (%v), want %d", i, r.at, d.Desired, d.Reason, r.want)
		}
		desired, state = d.Desired, d.State
	}
}

func TestSkywardReasonWords(t *testing.T) {
	p := NewSkyward(skyConfig(capacity.Elastic(2, 6), 2))
	tests := []struct {
		name  string
		in    Input
		words string
	}{
		{"scale-up names the figures", Input{Now: skyT0, Desired: 2, Pressure: skyPressure(2, 4, 3)},
			"scale-up: queued=3 inflight=4 capacity=4 nodes=2: adding"},
		{"at max says so", Input{Now: skyT0, Desired: 6, Pressure: skyPressure(6, 12, 1)},
			"at-max: queued=1 inflight=12 capacity=12 nodes=6: the queue needs more nodes than max; desired is at max"},
		{"cooldown says how long", Input{Now: skyT0, Desired: 6, Pressure: skyPressure(6, 1, 0),
			State: State{LastScale: skyT0.Add(-10*time.Second - time.Millisecond)}},
			"cooldown: in cooldown for another 20s: queued=0 inflight=1 capacity=12 nodes=6"},
		{"low utilization names the threshold", Input{Now: skyT0, Desired: 6, Pressure: skyPressure(6, 3, 0)},
			"scale-down: queued=0 inflight=3 capacity=12 nodes=6: utilization below 30%;"},
		{"idle names the idle time and min", Input{Now: skyT0, Desired: 6, Pressure: skyPressure(6, 0, 0),
			State: State{LastBusy: skyT0.Add(-90 * time.Second)}},
			"idle: idle for 90s, longer than the idle timeout: inflight=0 capacity=12 nodes=6; releasing to min 2"},
		{"clamp names the bounds", Input{Now: skyT0, Desired: 9, Pressure: skyPressure(6, 6, 0)},
			"at-max: desired 9 is outside [min 2, max 6]; clamped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, err := p.Decide(tt.in).Reason.MarshalText()
			if err != nil || !strings.HasPrefix(string(text), tt.words) {
				t.Errorf("reason = %q, %v; want prefix %q", text, err, tt.words)
			}
		})
	}
}

// skywardAllocInputs covers every branch of the tree.
func skywardAllocInputs() []Input {
	return []Input{
		{Now: skyT0, Desired: 4, Pressure: skyPressure(4, 4, 12)},
		{Now: skyT0, Desired: 6, Pressure: skyPressure(6, 2, 0), State: State{LastScale: skyT0.Add(-time.Second)}},
		{Now: skyT0, Desired: 6, Pressure: skyPressure(6, 0, 0), State: State{LastBusy: skyT0.Add(-time.Hour)}},
		{Now: skyT0, Desired: 6, Pressure: skyPressure(6, 1, 0)},
		{Now: skyT0, Desired: 4, Pressure: skyPressure(4, 6, 0)},
		{Now: skyT0, Desired: 9, Pressure: skyPressure(4, 6, 0)},
	}
}

var skySink Decision

func TestSkywardDecideAllocs(t *testing.T) {
	p := NewSkyward(skyConfig(capacity.Elastic(2, 6), 2))
	for i, in := range skywardAllocInputs() {
		if allocs := testing.AllocsPerRun(200, func() { skySink = p.Decide(in) }); allocs > 0 {
			t.Errorf("input %d: Decide allocates %.1f times per call, want 0", i, allocs)
		}
	}
}

func BenchmarkSkywardDecide(b *testing.B) {
	for _, size := range []int{4, 64} {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			p := NewSkyward(skyConfig(capacity.Elastic(2, 2*size), 2))
			in := Input{Now: skyT0, Desired: size, Pressure: skyPressure(size, size, 3*size)}
			b.ReportAllocs()
			for b.Loop() {
				skySink = p.Decide(in)
			}
		})
	}
}
