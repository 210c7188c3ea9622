package decide

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
)

const snapshot = `{
  "time": "2026-01-01T00:00:00Z",
  "desired": 1,
  "nodes": [{"id": "n0", "ordinal": 0, "resources": {"cpu": "4", "memory": "8Gi"},
             "running": [{"requests": {"cpu": "1"}}, {"requests": {"cpu": "500m"}, "daemon": true}]}],
  "pending": [{"requests": {"cpu": "2", "memory": "1Gi"}, "count": 3}],
  "state": {"last_scale": "2025-12-31T23:59:00Z"}
}`

func TestParse(t *testing.T) {
	s, err := Parse([]byte(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	if s.Desired != 1 || len(s.Nodes) != 1 || !s.Nodes[0].Running[1].Daemon || s.Pending[0].Count != 3 ||
		s.Pending[0].Requests.Memory != 1<<30 || !s.State.LastScale.Equal(time.Date(2025, 12, 31, 23, 59, 0, 0, time.UTC)) {
		t.Fatalf("parsed %+v", s)
	}
	for _, tt := range []struct{ in, want string }{
		{strings.Replace(snapshot, `"id": "n0"`, `"id": ""`, 1), "nodes[0].id: must be set"},
		{strings.Replace(snapshot, `"ordinal": 0`, `"ordinal": -2`, 1), "nodes[0].ordinal: must not be negative"},
		{strings.Replace(snapshot, `"cpu": "2", "memory": "1Gi"`, `"memory": "0"`, 1), "pending[0].requests: must request some resource"},
		{strings.Replace(snapshot, `"last_scale"`, `"low_datapoints": -1, "last_scale"`, 1), "state.low_datapoints: must not be negative"},
		{strings.Replace(snapshot, `"last_scale"`, `"lastscale"`, 1), "state.lastscale: unknown field"},
		{snapshot + "{}", "unexpected data"},
	} {
		if _, err := Parse([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse: %v, want an error containing %q", err, tt.want)
		}
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	s, err := Parse([]byte(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run("p", policy.Config{Policy: "nope", Nodes: capacity.Elastic(0, 3)}, s)
	if err == nil || !strings.Contains(err.Error(), `policy: unknown policy "nope"`) {
		t.Fatalf("Run = %v", err)
	}
}

func TestRunChainsState(t *testing.T) {
	s, err := Parse([]byte(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	cfg := policy.Config{Policy: policy.Skyward, Nodes: capacity.Elastic(1, 5), SlotsPerNode: 2}
	res, err := Run("p", cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	if res.Policy != policy.Skyward || res.Previous != 1 || res.Desired <= 1 || !res.Changed || res.Reason == "" {
		t.Fatalf("result %+v", res)
	}
	// The result's state goes into the next snapshot unchanged.
	out, err := json.Marshal(res.State)
	if err != nil {
		t.Fatal(err)
	}
	var back policy.State
	if err := json.Unmarshal(out, &back); err != nil || back != res.State {
		t.Fatalf("state round trip %s: %+v %v", out, back, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(snapshot))
	f.Add([]byte(`{"time":"2026-01-01T00:00:00Z","desired":0,"nodes":[],"pending":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		if s.Desired < 0 || s.Time.IsZero() {
			t.Fatalf("accepted an invalid snapshot: %+v", s)
		}
		for _, p := range s.Pending {
			if p.Count < 0 || p.Requests.Negative() {
				t.Fatalf("accepted a negative pending group: %+v", p)
			}
		}
		for _, n := range []policy.Config{
			{Policy: policy.Skyward, Nodes: capacity.Elastic(0, 8)},
			{Policy: policy.Utilization, Nodes: capacity.Elastic(0, 8)},
		} {
			res, err := Run("fuzz", n, s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Desired < 0 || res.Desired > 8 {
				t.Fatalf("%s: desired %d outside [0, 8]", n.Policy, res.Desired)
			}
		}
	})
}
