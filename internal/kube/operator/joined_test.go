package operator

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tide-project/tide/sdk/provider"
)

// machines is a provider whose machines are all Configured.
type machines struct {
	provider.Provider
	ids []string
}

// Get reports machine id Configured.
func (m machines) Get(_ context.Context, id string) (provider.Machine, error) {
	return provider.Machine{ID: id, State: provider.Configured}, nil
}

// List reports every machine Configured.
func (m machines) List(context.Context, provider.Filter) ([]provider.Machine, error) {
	var out []provider.Machine
	for _, id := range m.ids {
		out = append(out, provider.Machine{ID: id, State: provider.Configured})
	}
	return out, nil
}

// TestConfiguredOnceNodeReady: through tide kube's joining layer a machine
// the provider reports Configured is Configuring until its Node is Ready
// (no Node, or a Node not Ready yet), then Configured, and stays so when
// its Node later turns NotReady.
func TestConfiguredOnceNodeReady(t *testing.T) {
	ctx := context.Background()
	c := crfake.NewClientBuilder().Build()
	o := &Operator{cfg: Config{Client: c}}
	j := joining{Provider: machines{ids: []string{"m-1", "m-2"}}, o: o, r: &runner{joined: map[string]bool{}}}
	state := func(id string) provider.State {
		t.Helper()
		m, err := j.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := j.List(ctx, provider.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ms {
			if x.ID == id && x.State != m.State {
				t.Fatalf("%s: Get says %s, List %s", id, m.State, x.State)
			}
		}
		return m.State
	}
	if s := state("m-1"); s != provider.Configuring {
		t.Fatalf("m-1 without a Node: %s, want configuring", s)
	}
	setReady := func(id string, st corev1.ConditionStatus) {
		t.Helper()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: id}}
		if err := c.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
			if err := c.Create(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
		if err := c.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	setReady("m-1", corev1.ConditionFalse)
	if s := state("m-1"); s != provider.Configuring {
		t.Fatalf("m-1 with a Node not Ready: %s, want configuring", s)
	}
	setReady("m-1", corev1.ConditionTrue)
	if s := state("m-1"); s != provider.Configured {
		t.Fatalf("m-1 with its Node Ready: %s, want configured", s)
	}
	if s := state("m-2"); s != provider.Configuring {
		t.Fatalf("m-2 without a Node: %s, want configuring", s)
	}
	setReady("m-1", corev1.ConditionFalse)
	if s := state("m-1"); s != provider.Configured {
		t.Fatalf("m-1 whose Node turned NotReady after joining: %s, want configured", s)
	}
}
