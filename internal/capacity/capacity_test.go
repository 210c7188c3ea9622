package capacity

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseCPU(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"500m", 500, false},
		{"2", 2000, false},
		{"1.5", 1500, false},
		{"0.001", 1, false},
		{"0", 0, false},
		{" 16 ", 16000, false},
		{"0.0005", 0, true},
		{"-1", 0, true},
		{"+1", 0, true},
		{"", 0, true},
		{"m", 0, true},
		{"1e3", 0, true},
		{"abc", 0, true},
		{"1.5m", 0, true},
		{"99999999999999999999", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseCPU(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseCPU(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrQuantity) {
			t.Errorf("ParseCPU(%q) error %v does not wrap ErrQuantity", tt.in, err)
		}
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"4Gi", 4 << 30, false},
		{"512Mi", 512 << 20, false},
		{"1G", 1e9, false},
		{"1.5Gi", 3 << 29, false},
		{"1024", 1024, false},
		{"1k", 1000, false},
		{"2Ki", 2048, false},
		{"0", 0, false},
		{"1.5", 0, true},
		{"-4Gi", 0, true},
		{"4GB", 0, true},
		{"Gi", 0, true},
		{"16Ei", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseCount(t *testing.T) {
	if n, err := ParseCount("16"); err != nil || n != 16 {
		t.Fatalf("ParseCount(16) = %d, %v", n, err)
	}
	for _, bad := range []string{"-1", "1.5", "", "x"} {
		if _, err := ParseCount(bad); err == nil {
			t.Errorf("ParseCount(%q) succeeded", bad)
		}
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for _, milli := range []int64{0, 1, 500, 1000, 1500, 64000} {
		got, err := ParseCPU(FormatCPU(milli))
		if err != nil || got != milli {
			t.Errorf("cpu %d -> %q -> %d, %v", milli, FormatCPU(milli), got, err)
		}
	}
	for _, b := range []int64{0, 1, 1000, 1024, 4 << 30, 3 << 29, 256 << 30} {
		got, err := ParseBytes(FormatBytes(b))
		if err != nil || got != b {
			t.Errorf("bytes %d -> %q -> %d, %v", b, FormatBytes(b), got, err)
		}
	}
}

func TestResourcesArithmetic(t *testing.T) {
	a := Resources{MilliCPU: 2000, Memory: 4 << 30, GPUs: 1, Extended: map[string]int64{"fpga": 1}}
	b := Resources{MilliCPU: 500, Memory: 1 << 30}
	sum := a.Add(b)
	if sum.MilliCPU != 2500 || sum.Memory != 5<<30 || sum.GPUs != 1 || sum.Extended["fpga"] != 1 {
		t.Fatalf("Add = %v", sum)
	}
	if !sum.Sub(b).Equal(a) {
		t.Fatalf("Sub(Add) = %v, want %v", sum.Sub(b), a)
	}
	if !b.Fits(a) || a.Fits(b) {
		t.Fatal("Fits wrong")
	}
	if (Resources{Extended: map[string]int64{"fpga": 2}}).Fits(a) {
		t.Fatal("extended resource beyond capacity fits")
	}
	if !(Resources{Extended: map[string]int64{"fpga": 0}}).Fits(b) {
		t.Fatal("zero extended request does not fit")
	}
	if !b.Sub(a).Negative() || a.Negative() {
		t.Fatal("Negative wrong")
	}
	if got := b.Scale(3); got.MilliCPU != 1500 || got.Memory != 3<<30 {
		t.Fatalf("Scale = %v", got)
	}
	if !(Resources{Extended: map[string]int64{"x": 0}}).IsZero() || a.IsZero() {
		t.Fatal("IsZero wrong")
	}
	if a.Extended["fpga"] != 1 || len(b.Extended) != 0 {
		t.Fatal("arithmetic modified its operands")
	}
	if got := a.String(); got != "cpu=2 mem=4Gi gpu=1 fpga=1" {
		t.Fatalf("String = %q", got)
	}
}

func TestResourcesJSON(t *testing.T) {
	var r Resources
	if err := json.Unmarshal([]byte(`{"cpu":"500m","memory":"4Gi","gpus":2,"extended":{"fpga":1}}`), &r); err != nil {
		t.Fatal(err)
	}
	want := Resources{MilliCPU: 500, Memory: 4 << 30, GPUs: 2, Extended: map[string]int64{"fpga": 1}}
	if !r.Equal(want) {
		t.Fatalf("got %v want %v", r, want)
	}
	if err := json.Unmarshal([]byte(`{"cpu":1.5,"memory":1024}`), &r); err != nil || r.MilliCPU != 1500 || r.Memory != 1024 {
		t.Fatalf("numeric form: %v %v", r, err)
	}
	out, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var back Resources
	if err := json.Unmarshal(out, &back); err != nil || !back.Equal(want) {
		t.Fatalf("round trip %s: %v %v", out, back, err)
	}
	bad := map[string]string{
		`{"cpu":"lots"}`:           "cpu",
		`{"memory":"4GB"}`:         "memory",
		`{"gpus":1.5}`:             "gpus",
		`{"gpus":-1}`:              "gpus",
		`{"cpus":1}`:               "cpus",
		`{"extended":{"fpga":-1}}`: "extended.fpga",
		`{"cpu":"-500m"}`:          "cpu",
		`{"memory":-1}`:            "memory",
	}
	for in, field := range bad {
		err := json.Unmarshal([]byte(in), &r)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Unmarshal(%s) = %v, want an error naming %q", in, err, field)
		}
	}
}

func TestOfferingJSON(t *testing.T) {
	var o Offering
	in := `{"type":"g8","zone":"z1","capacity":"spot","cpu":32,"memory":"256Gi","gpus":8,"price":9.1,"interruption_probability":0.05,"interruption_penalty":40}`
	if err := json.Unmarshal([]byte(in), &o); err != nil {
		t.Fatal(err)
	}
	if o.Resources.MilliCPU != 32000 || o.Resources.GPUs != 8 || o.Kind != Spot || o.Name() != "g8/z1/spot" {
		t.Fatalf("got %+v", o)
	}
	if got := o.EffectiveCost(); got < 11.09 || got > 11.11 {
		t.Fatalf("EffectiveCost = %v, want 9.1 + 0.05*40 = 11.1", got)
	}
	out, _ := json.Marshal(o)
	var back Offering
	if err := json.Unmarshal(out, &back); err != nil || back.Name() != o.Name() || !back.Resources.Equal(o.Resources) {
		t.Fatalf("round trip %s: %+v %v", out, back, err)
	}
	bad := map[string]string{
		`{"type":"a","cpu":1,"price":1,"capacity":"cheap"}`:           "capacity",
		`{"cpu":1,"price":1}`:                                         "type",
		`{"type":"a","price":1}`:                                      "resources",
		`{"type":"a","cpu":1,"price":-1}`:                             "price",
		`{"type":"a","cpu":1,"price":1,"interruption_probability":2}`: "interruption_probability",
		`{"type":"a","cpu":1,"price":1,"colour":"red"}`:               "colour",
		`{"type":"a","cpu":"x","price":1}`:                            "cpu",
	}
	for in, field := range bad {
		err := json.Unmarshal([]byte(in), &o)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Unmarshal(%s) = %v, want an error naming %q", in, err, field)
		}
	}
}

func TestNodeSpecForms(t *testing.T) {
	tests := []struct {
		in      string
		want    NodeSpec
		initial int
		errHas  string
	}{
		{in: `4`, want: NodeSpec{Min: 4, Desired: 4, Max: 4}, initial: 4},
		{in: `[2, 16]`, want: NodeSpec{Min: 2, Desired: 2, Max: 16, Elastic: true}, initial: 2},
		{in: `{"min": 8, "desired": 4}`, want: NodeSpec{Min: 8, Desired: 4, Max: 8}, initial: 8},
		{in: `{"min": 4, "desired": 2, "max": 16}`, want: NodeSpec{Min: 4, Desired: 2, Max: 16, Elastic: true}, initial: 4},
		{in: `{"min": 0, "desired": 3, "max": 8}`, want: NodeSpec{Min: 0, Desired: 3, Max: 8, Elastic: true}, initial: 3},
		{in: `{"min": 0, "max": 4}`, want: NodeSpec{Min: 0, Desired: 0, Max: 4, Elastic: true}, initial: 0},
		{in: `{"min": 3, "max": 3}`, want: NodeSpec{Min: 3, Desired: 3, Max: 3, Elastic: true}, initial: 3},
		{in: `0`, want: NodeSpec{}, initial: 0},
		{in: `-1`, errHas: "min: must not be negative"},
		{in: `[16, 2]`, errHas: "min: 16 is above max 2"},
		{in: `[1, 2, 3]`, errHas: "[min, max]"},
		{in: `{"min": 4, "desired": 8}`, errHas: "desired: 8 is above min 4"},
		{in: `{"min": 1, "desired": 20, "max": 16}`, errHas: "desired: 20 is above max 16"},
		{in: `{"desired": 2}`, errHas: "min: must be set"},
		{in: `{"min": 1, "maximum": 2}`, errHas: "maximum"},
		{in: `{"min": 0, "max": 0}`, errHas: "max: an elastic pool needs max ≥ 1"},
		{in: `"four"`, errHas: "want a count"},
		{in: `[0, -1]`, errHas: "max"},
	}
	for _, tt := range tests {
		var got NodeSpec
		err := json.Unmarshal([]byte(tt.in), &got)
		if tt.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("%s: err = %v, want it to contain %q", tt.in, err, tt.errHas)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: got %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if got.Initial() != tt.initial {
			t.Errorf("%s: Initial = %d, want %d", tt.in, got.Initial(), tt.initial)
		}
		out, _ := json.Marshal(got)
		var back NodeSpec
		if err := json.Unmarshal(out, &back); err != nil || back != got {
			t.Errorf("%s: round trip via %s = %+v, %v", tt.in, out, back, err)
		}
	}
}

func TestNodeSpecHelpers(t *testing.T) {
	s := NodeSpec{Min: 2, Desired: 4, Max: 16, Elastic: true}
	if s.Clamp(0) != 2 || s.Clamp(20) != 16 || s.Clamp(7) != 7 {
		t.Fatal("Clamp wrong")
	}
	if s.Ready(3) || !s.Ready(4) {
		t.Fatal("Ready wrong")
	}
	for spec, want := range map[NodeSpec]string{Fixed(4): "4", Elastic(2, 16): "[2, 16]", s: "{min: 2, desired: 4, max: 16}", {Min: 8, Desired: 4, Max: 8}: "{min: 8, desired: 4}"} {
		if spec.String() != want {
			t.Errorf("String(%+v) = %q, want %q", spec, spec.String(), want)
		}
	}
}

func TestPressureCounts(t *testing.T) {
	p := Pressure{
		Nodes: []Node{
			{ID: "a", Running: []Instance{{Requests: CPU(1000)}, {Requests: CPU(500), Daemon: true}}},
			{ID: "b", Running: []Instance{{Requests: CPU(100), Daemon: true}}},
			{ID: "c"},
		},
		Pending: []Pending{{Requests: CPU(1000), Count: 3}, {Requests: CPU(2000), Count: 2}},
	}
	if p.Queued() != 5 || p.Inflight() != 1 || p.BusyNodes() != 1 {
		t.Fatalf("Queued=%d Inflight=%d Busy=%d", p.Queued(), p.Inflight(), p.BusyNodes())
	}
	if got := p.Nodes[0].Allocated(); got.MilliCPU != 1500 {
		t.Fatalf("Allocated = %v", got)
	}
	p.Nodes[0].Resources = CPU(4000)
	if got := p.Nodes[0].Free(); got.MilliCPU != 2500 {
		t.Fatalf("Free = %v", got)
	}
}

func FuzzParseQuantities(f *testing.F) {
	for _, s := range []string{"500m", "4Gi", "16", "1.5", "-1", "1e9", "0.0001", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseCPU(s); err == nil {
			if v < 0 {
				t.Fatalf("ParseCPU(%q) = %d < 0", s, v)
			}
			if back, err := ParseCPU(FormatCPU(v)); err != nil || back != v {
				t.Fatalf("cpu %q: %d does not round-trip", s, v)
			}
		}
		if v, err := ParseBytes(s); err == nil {
			if v < 0 {
				t.Fatalf("ParseBytes(%q) = %d < 0", s, v)
			}
			if back, err := ParseBytes(FormatBytes(v)); err != nil || back != v {
				t.Fatalf("bytes %q: %d does not round-trip", s, v)
			}
		}
		var r Resources
		_ = json.Unmarshal([]byte(s), &r)
		var n NodeSpec
		if json.Unmarshal([]byte(s), &n) == nil {
			if err := n.Validate(); err != nil {
				t.Fatalf("NodeSpec %q accepted but invalid: %v", s, err)
			}
		}
	})
}
