package nodeagent

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
	f.Add([]byte(`{"kind":"tide.dev/node-join","version":1,"server":"https://a","token":"t","node":"n","provider_id":"tide://local/n","capacity":{"cpu":"1"}}`))
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

// TestRegisterAndHeartbeat: on a fake clientset, the agent registers its
// Node (providerID, labels, capacity, Ready), renews its Lease, puts its
// labels back on a Node that exists after a restart, and refuses a Node
// of another machine.
func TestRegisterAndHeartbeat(t *testing.T) {
	ctx := context.Background()
	j := Join{Node: "m-0-1", ProviderID: "tide://local/m-0-1", Labels: map[string]string{"tide.dev/pool": "m", "tier": "x"},
		Capacity: map[corev1.ResourceName]string{corev1.ResourceCPU: "4"}}
	cs := fake.NewClientset()
	a := &agent{cs: cs, j: j, interval: time.Second, log: slog.New(slog.DiscardHandler)}
	if err := a.register(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "m-0-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.ProviderID != j.ProviderID || n.Labels["tier"] != "x" || n.Status.Capacity.Cpu().String() != "4" || !ready(n) {
		t.Fatalf("registered Node %+v", n)
	}
	l, err := cs.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "m-0-1", metav1.GetOptions{})
	if err != nil || *l.Spec.HolderIdentity != "m-0-1" {
		t.Fatalf("lease %+v, %v", l, err)
	}
	// A restart finds the Node with its labels gone.
	n.Labels = nil
	if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.register(ctx); err != nil {
		t.Fatalf("register after a restart: %v", err)
	}
	if n, _ := cs.CoreV1().Nodes().Get(ctx, "m-0-1", metav1.GetOptions{}); n.Labels["tier"] != "x" {
		t.Fatalf("labels not put back: %v", n.Labels)
	}
	other := &agent{cs: cs, j: Join{Node: "m-0-1", ProviderID: "tide://local/m-9-9"}, interval: time.Second, log: a.log}
	if err := other.register(ctx); err == nil || !strings.Contains(err.Error(), "belongs to") {
		t.Fatalf("another machine took the Node: %v", err)
	}
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && c.Reason == ReadyReason {
			return true
		}
	}
	return false
}

// TestParseKubeletMode: a kubelet-mode Join carries a bootstrap token of
// kubeadm's form; anything else is refused before a kubelet would retry it
// for ever.
func TestParseKubeletMode(t *testing.T) {
	j := Join{Mode: ModeKubelet, Server: "https://10.0.0.1:6443", Token: "abc123.0123456789abcdef", Node: "m-1", ProviderID: "tide://netns/m-1"}
	b, err := j.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Parse(b); err != nil || got.Mode != ModeKubelet {
		t.Fatalf("Parse = %+v, %v", got, err)
	}
	for _, tok := range []string{"abc12.0123456789abcdef", "ABC123.0123456789abcdef", "abc123.0123456789abcde", "not-a-token"} {
		j.Token = tok
		b, _ := j.Encode()
		if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), "token") {
			t.Errorf("token %q: err %v, want one naming the token", tok, err)
		}
	}
	j.Token, j.Mode = "abc123.0123456789abcdef", "kubeadm"
	b, _ = j.Encode()
	if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Errorf("mode kubeadm: err %v", err)
	}
}
