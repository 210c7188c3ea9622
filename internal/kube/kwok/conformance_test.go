package kwok

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/provider/providertest"
	"github.com/tide-project/tide/sdk/provider"
)

var testOfferings = []capacity.Offering{
	{Type: "g8", Kind: capacity.OnDemand, PricePerHour: 24.5,
		Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}},
	{Type: "c4", Kind: capacity.OnDemand, PricePerHour: 0.2, Resources: capacity.Resources{MilliCPU: 4000, Memory: 16 << 30}},
}

// settle waits (bounded) until kwok has made every Node of p Ready and
// every deletion under way has finished.
func settle(t *testing.T, p *Provider) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := p.Sync(ctx); err != nil {
			t.Fatalf("sync: %v", err)
		}
		nodes, err := p.cfg.API.ListNodes(ctx, ScopeLabel+"="+p.cfg.Scope)
		if err != nil {
			t.Fatal(err)
		}
		busy := 0
		for i := range nodes {
			if m := machine(&nodes[i]); m.State == provider.Creating || m.State == provider.Deleting {
				busy++
			}
		}
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("settle: %d machines still creating or deleting", busy)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConformance runs the provider conformance suite against a real
// kube-apiserver with kwok making the Nodes Ready; each subtest gets its
// own scope (and Node name prefix), so it starts with no machines.
func TestConformance(t *testing.T) {
	c := kubetest.Shared(t)
	api, err := kubeapi.NewREST(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		scope := fmt.Sprintf("c%d", n.Add(1))
		p, err := New(Config{API: api, Offerings: testOfferings, Scope: scope, NamePrefix: scope + "-"})
		if err != nil {
			t.Fatal(err)
		}
		return providertest.Harness{Provider: p, Offering: "g8/on-demand", Settle: func() { settle(t, p) }}
	})
}

// TestNodesCarryThePoolTemplate checks what a Kubernetes user sees of a
// machine: a Ready Node with the pool's labels and taints, the offering's
// resources, and a providerID naming the machine; and that a new provider
// (a controller after failover) sees the same machines and fences.
func TestNodesCarryThePoolTemplate(t *testing.T) {
	c := kubetest.Shared(t)
	api, err := kubeapi.NewREST(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{API: api, Offerings: testOfferings, Scope: "tpl", Namespace: "default",
		NodeLabels: map[string]string{"accelerator": "nvidia"}}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	f := provider.Fence{Controller: "a", Epoch: 1}
	if _, err := p.Create(ctx, provider.CreateRequest{Fence: f, Pool: "gpu", MachineID: "gpu-0", Offering: "g8/on-demand"}); err != nil {
		t.Fatal(err)
	}
	settle(t, p)
	n, err := api.GetNode(ctx, "gpu-0")
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.ProviderID != "kwok://gpu-0" || n.Labels["accelerator"] != "nvidia" || n.Labels["tide.dev/pool"] != "gpu" {
		t.Fatalf("node = %+v", n.ObjectMeta)
	}
	if q := n.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 8 {
		t.Fatalf("allocatable = %v", n.Status.Allocatable)
	}
	// A second provider on the same cluster state: same machine, same fences.
	p2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := p2.Get(ctx, "gpu-0"); err != nil || m.State != provider.Idle || m.Host != "gpu-0" {
		t.Fatalf("after failover: %+v, %v", m, err)
	}
	if ack, err := p2.Create(ctx, provider.CreateRequest{Fence: provider.Fence{Controller: "b", Epoch: 2}, Pool: "gpu",
		MachineID: "gpu-0", Offering: "g8/on-demand"}); err != nil || !ack.Replayed {
		t.Fatalf("replay after failover = %+v, %v", ack, err)
	}
	if _, err := p.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "gpu", MachineID: "gpu-0"}); !provider.IsStaleFence(err) {
		t.Fatalf("deposed controller's Delete = %v, want StaleFence", err)
	}
}
