package agent

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/httpapi"
)

func desired(id string, attempt int64, expected string) httpapi.DesiredInstance {
	return httpapi.DesiredInstance{InstanceID: id, Attempt: attempt, Command: "true", ExpectedStatus: expected}
}

// TestPlanReconcile ports PyLet's worker reconcile scenarios (test_worker.py,
// ARCHITECTURE's example) and tide's additions.
func TestPlanReconcile(t *testing.T) {
	const def = 30 * time.Second
	tests := []struct {
		name     string
		desired  []httpapi.DesiredInstance
		stopping []httpapi.StoppingInstance
		local    []localView
		want     string
	}{
		{
			name:    "architecture example: stale attempt killed, missing started, undesired killed",
			desired: []httpapi.DesiredInstance{desired("a", 2, "ASSIGNED"), desired("b", 1, "ASSIGNED")},
			local:   []localView{{key{"a", 1}, phaseRunning}, {key{"c", 1}, phaseRunning}},
			want:    `{"Start":["a@2","b@1"],"Stop":["a@1/30s","c@1/30s"],"Drop":[]}`,
		},
		{
			name:    "desired and running: nothing to do",
			desired: []httpapi.DesiredInstance{desired("a", 1, "RUNNING")},
			local:   []localView{{key{"a", 1}, phaseRunning}},
			want:    `{"Start":[],"Stop":[],"Drop":[]}`,
		},
		{
			name:    "expected RUNNING but missing is not started again (reported NOT_FOUND)",
			desired: []httpapi.DesiredInstance{desired("a", 1, "RUNNING"), desired("b", 1, "UNKNOWN")},
			want:    `{"Start":[],"Stop":[],"Drop":[]}`,
		},
		{
			name:     "cancel request carries its grace period",
			stopping: []httpapi.StoppingInstance{{InstanceID: "a", Attempt: 1, GracePeriodSeconds: 2.5}},
			local:    []localView{{key{"a", 1}, phaseRunning}},
			want:     `{"Start":[],"Stop":["a@1/2.5s"],"Drop":[]}`,
		},
		{
			name:     "zero grace kills at once",
			stopping: []httpapi.StoppingInstance{{InstanceID: "a", Attempt: 1, GracePeriodSeconds: 0}},
			local:    []localView{{key{"a", 1}, phaseRunning}},
			want:     `{"Start":[],"Stop":["a@1/0s"],"Drop":[]}`,
		},
		{
			name:  "stopping is left to the monitor",
			local: []localView{{key{"a", 1}, phaseStopping}},
			want:  `{"Start":[],"Stop":[],"Drop":[]}`,
		},
		{
			name:  "exited and forgotten by the head is dropped",
			local: []localView{{key{"a", 1}, phaseExited}},
			want:  `{"Start":[],"Stop":[],"Drop":["a@1"]}`,
		},
		{
			name:    "exited but still desired keeps being reported (fast exit before RUNNING, A14.3)",
			desired: []httpapi.DesiredInstance{desired("a", 1, "ASSIGNED")},
			local:   []localView{{key{"a", 1}, phaseExited}},
			want:    `{"Start":[],"Stop":[],"Drop":[]}`,
		},
		{
			name:     "exited while being cancelled keeps being reported until the head confirms",
			stopping: []httpapi.StoppingInstance{{InstanceID: "a", Attempt: 1, GracePeriodSeconds: 30}},
			local:    []localView{{key{"a", 1}, phaseExited}},
			want:     `{"Start":[],"Stop":[],"Drop":[]}`,
		},
		{
			name:     "cancelled before it started here: nothing to start or stop",
			stopping: []httpapi.StoppingInstance{{InstanceID: "a", Attempt: 1, GracePeriodSeconds: 30}},
			want:     `{"Start":[],"Stop":[],"Drop":[]}`,
		},
		{
			name:    "PyLet heads send no expected_status: treated as ASSIGNED",
			desired: []httpapi.DesiredInstance{desired("a", 1, "")},
			want:    `{"Start":["a@1"],"Stop":[],"Drop":[]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planReconcile(tt.desired, tt.stopping, tt.local, def)
			if got := describePlan(p); got != tt.want {
				t.Fatalf("plan = %s\nwant   %s", got, tt.want)
			}
		})
	}
}

func describePlan(p reconcilePlan) string {
	out := struct{ Start, Stop, Drop []string }{[]string{}, []string{}, []string{}}
	for _, d := range p.Start {
		out.Start = append(out.Start, keyString(key{d.InstanceID, d.Attempt}))
	}
	for _, s := range p.Stop {
		out.Stop = append(out.Stop, keyString(s.Key)+"/"+s.Grace.String())
	}
	for _, k := range p.Drop {
		out.Drop = append(out.Drop, keyString(k))
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func keyString(k key) string { return k.ID + "@" + itoa(k.Attempt) }

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestBuildReports covers PyLet's report rules (test_worker.py: RUNNING,
// COMPLETED, NOT_FOUND, not for ASSIGNED) and that every local process,
// stopping and exited included, is reported.
func TestBuildReports(t *testing.T) {
	tests := []struct {
		name        string
		local       []reportView
		lastDesired []httpapi.DesiredInstance
		want        string
	}{
		{
			name:  "running with port",
			local: []reportView{{Key: key{"a", 1}, Phase: phaseRunning, Port: 15600}},
			want:  `[{"instance_id":"a","attempt":1,"status":"RUNNING","port":15600}]`,
		},
		{
			name:  "stopping is reported, so a cancel is not completed under it",
			local: []reportView{{Key: key{"a", 1}, Phase: phaseStopping}},
			want:  `[{"instance_id":"a","attempt":1,"status":"STOPPING"}]`,
		},
		{
			name: "exits: completed, failed, killed by signal, stopped, start failure",
			local: []reportView{
				{Key: key{"a", 1}, Phase: phaseExited, Outcome: outcome{Code: 0}},
				{Key: key{"b", 1}, Phase: phaseExited, Outcome: outcome{Code: 3}},
				{Key: key{"c", 1}, Phase: phaseExited, Outcome: outcome{Code: -9}},
				{Key: key{"d", 1}, Phase: phaseExited, Outcome: outcome{Code: 143, Stopped: true}},
				{Key: key{"e", 1}, Phase: phaseExited, Outcome: outcome{Code: 0, Stopped: true}},
				{Key: key{"f", 1}, Phase: phaseExited, Outcome: outcome{Code: -1, StartFailed: true}},
			},
			want: `[{"instance_id":"a","attempt":1,"status":"COMPLETED","exit_code":0},` +
				`{"instance_id":"b","attempt":1,"status":"FAILED","exit_code":3},` +
				`{"instance_id":"c","attempt":1,"status":"FAILED","exit_code":-9},` +
				`{"instance_id":"d","attempt":1,"status":"CANCELLED","exit_code":143},` +
				`{"instance_id":"e","attempt":1,"status":"CANCELLED","exit_code":0},` +
				`{"instance_id":"f","attempt":1,"status":"FAILED","exit_code":-1}]`,
		},
		{
			name:        "lost after restart: NOT_FOUND for expected RUNNING or UNKNOWN, never for ASSIGNED",
			lastDesired: []httpapi.DesiredInstance{desired("a", 1, "RUNNING"), desired("b", 2, "UNKNOWN"), desired("c", 1, "ASSIGNED")},
			want: `[{"instance_id":"a","attempt":1,"status":"NOT_FOUND"},` +
				`{"instance_id":"b","attempt":2,"status":"NOT_FOUND"}]`,
		},
		{
			name:        "a stale attempt is reported with its own attempt",
			local:       []reportView{{Key: key{"a", 1}, Phase: phaseStopping}, {Key: key{"a", 2}, Phase: phaseRunning, Port: 1}},
			lastDesired: []httpapi.DesiredInstance{desired("a", 2, "ASSIGNED")},
			want: `[{"instance_id":"a","attempt":1,"status":"STOPPING"},` +
				`{"instance_id":"a","attempt":2,"status":"RUNNING","port":1}]`,
		},
		{
			name: "nothing local, nothing desired",
			want: `[]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(buildReports(tt.local, tt.lastDesired))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("reports = %s\nwant      %s", b, tt.want)
			}
		})
	}
}
