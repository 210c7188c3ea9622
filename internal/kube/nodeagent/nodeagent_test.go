package nodeagent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParse(t *testing.T) {
	good := Join{Server: "https://10.0.0.1:6443", Token: "t", Node: "m-0-1", ProviderID: "tide://local/m-0-1",
		Capacity: map[corev1.ResourceName]string{corev1.ResourceCPU: "4", corev1.ResourceMemory: "8Gi"}}
	tests := []struct {
		name  string
		edit  func(*Join)
		field string // "" = valid
	}{
		{name: "valid", edit: func(*Join) {}},
		{name: "no server", edit: func(j *Join) { j.Server = "10.0.0.1" }, field: "server"},
		{name: "no token", edit: func(j *Join) { j.Token = "" }, field: "token"},
		{name: "no node", edit: func(j *Join) { j.Node = "" }, field: "node"},
		{name: "no provider id", edit: func(j *Join) { j.ProviderID = "" }, field: "provider_id"},
		{name: "bad quantity", edit: func(j *Join) { j.Capacity[corev1.ResourceCPU] = "four" }, field: "capacity.cpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := good
			j.Capacity = map[corev1.ResourceName]string{corev1.ResourceCPU: "4", corev1.ResourceMemory: "8Gi"}
			tt.edit(&j)
			b, err := j.Encode()
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(b)
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("valid join refused: %v", err)
			case tt.field == "" && got.Node != j.Node:
				t.Fatalf("round trip: %+v", got)
			case tt.field != "" && (err == nil || !strings.Contains(err.Error(), tt.field)):
				t.Fatalf("error %v, want one naming %s", err, tt.field)
			}
		})
	}
	if _, err := Parse([]byte(`{"version":2}`)); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("version 2 accepted: %v", err)
	}
}

// FuzzParse: Parse never panics, and what it accepts encodes and parses
// back the same.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"version":1,"server":"https://a","token":"t","node":"n","provider_id":"tide://local/n","capacity":{"cpu":"1"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := Parse(b)
		if err != nil {
			return
		}
		out, err := j.Encode()
		if err != nil {
			t.Fatal(err)
		}
		k, err := Parse(out)
		if err != nil || k.Node != j.Node || k.Token != j.Token || k.ProviderID != j.ProviderID {
			t.Fatalf("round trip of %s: %+v, %v", out, k, err)
		}
	})
}
