package demand_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/nodepool"
	"github.com/tide-project/tide/internal/policy"
)

// cluster is a set of Kubernetes objects a scenario mutates the way the
// controller would: marks are taints, deletions remove the Node.
type cluster struct {
	nodes []*corev1.Node
	pods  []*corev1.Pod
}

func gpuNode(i int) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gpu-%d", i),
		Labels:      map[string]string{nodepool.PoolLabel: "gpu", "accelerator": "nvidia"},
		Annotations: map[string]string{demand.OrdinalAnnotation: fmt.Sprint(i)}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"),
			corev1.ResourceMemory: resource.MustParse("256Gi"), demand.GPUResource: resource.MustParse("8")}}}
}

// setBusy puts one 8-GPU pod on each of the busy lowest-numbered nodes and a
// DaemonSet pod on every node (which must not count).
func (c *cluster) setBusy(busy int) {
	c.pods = nil
	for _, n := range c.nodes {
		i := demand.Ordinal(n)
		c.pods = append(c.pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "agent-" + n.Name,
			OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent"}}},
			Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}})
		if i < busy {
			c.pods = append(c.pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-" + n.Name},
				Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{demand.GPUResource: resource.MustParse("8")}}}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning}})
		}
	}
}

// apply carries out the utilization figures on the objects.
func (c *cluster) apply(f *policy.UtilizationFigures, now time.Time) {
	var kept []*corev1.Node
	for _, n := range c.nodes {
		switch {
		case slices.Contains(f.Delete, n.Name):
			continue
		case slices.Contains(f.Mark, n.Name):
			n.Spec.Taints = demand.SetMark(n.Spec.Taints, now)
		case slices.Contains(f.Unmark, n.Name):
			n.Spec.Taints = demand.ClearMark(n.Spec.Taints)
		}
		kept = append(kept, n)
	}
	c.nodes = kept
}

func ids(hi, lo int) []string {
	var out []string
	for i := hi; i >= lo; i-- {
		out = append(out, fmt.Sprintf("gpu-%d", i))
	}
	return out
}

func marked(nodes []*corev1.Node) int {
	n := 0
	for _, x := range nodes {
		if !demand.Mark(x).IsZero() {
			n++
		}
	}
	return n
}

type step struct {
	at                   time.Duration
	busy, target         int
	mark, unmark, delete []string
	nodes, marked        int
}

// runSeed001 plays one of seed 001's scenarios on Kubernetes objects: the
// NodePool spec is read by nodepool.Parse, the pressure by demand.Compute
// (marks read back from the taints), and the utilization policy decides.
func runSeed001(t *testing.T, steps []step) {
	t.Helper()
	np, err := nodepool.Parse("gpu", []byte(`{"nodes":{"min":0,"max":200},"provider":{"type":"kwok"},
		"node_labels":{"accelerator":"nvidia"},"node_taints":[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}],
		"scaling":{"policy":"utilization","min_utilization":80,"scale_down_delay":"10m"}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := np.Config.PolicyConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{}
	for i := range 120 {
		c.nodes = append(c.nodes, gpuNode(i))
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var state policy.State
	for i, s := range steps {
		now := t0.Add(s.at)
		if s.busy >= 0 {
			c.setBusy(s.busy)
		}
		rep := demand.Compute([]demand.Pool{np.Demand()}, c.nodes, c.pods)
		d := p.Decide(policy.Input{Now: now, Desired: len(c.nodes), Pressure: rep.Pressure["gpu"], State: state})
		state = d.State
		f := d.Utilization
		if d.Desired != s.target || f == nil {
			t.Fatalf("step %d: desired %d (%v), want %d", i, d.Desired, d.Reason, s.target)
		}
		for _, x := range []struct {
			name      string
			got, want []string
		}{{"mark", f.Mark, s.mark}, {"unmark", f.Unmark, s.unmark}, {"delete", f.Delete, s.delete}} {
			if len(x.got) != len(x.want) || (len(x.want) > 0 && !slices.Equal(x.got, x.want)) {
				t.Fatalf("step %d: %s %v, want %v", i, x.name, x.got, x.want)
			}
		}
		c.apply(f, now)
		if len(c.nodes) != s.nodes || marked(c.nodes) != s.marked {
			t.Fatalf("step %d: %d nodes, %d tainted; want %d, %d", i, len(c.nodes), marked(c.nodes), s.nodes, s.marked)
		}
	}
}

const d = 10 * time.Minute

// TestSeed001ScenarioAOnNodes: 120 nodes, 80 busy: 20 tainted at t=0,
// deleted at t=d.
func TestSeed001ScenarioAOnNodes(t *testing.T) {
	runSeed001(t, []step{
		{at: 0, busy: 80, target: 100, mark: ids(119, 100), nodes: 120, marked: 20},
		{at: d / 2, busy: -1, target: 100, nodes: 120, marked: 20},
		{at: d, busy: -1, target: 100, delete: ids(119, 100), nodes: 100, marked: 0},
		{at: d, busy: -1, target: 100, nodes: 100, marked: 0},
	})
}

// TestSeed001ScenarioBOnNodes: at t=d busy drops to 60: the 20 go, then 25
// more are tainted and go at 2d.
func TestSeed001ScenarioBOnNodes(t *testing.T) {
	runSeed001(t, []step{
		{at: 0, busy: 80, target: 100, mark: ids(119, 100), nodes: 120, marked: 20},
		{at: d, busy: 60, target: 75, delete: ids(119, 100), nodes: 100, marked: 0},
		{at: d, busy: -1, target: 75, mark: ids(99, 75), nodes: 100, marked: 25},
		{at: 2 * d, busy: -1, target: 75, delete: ids(99, 75), nodes: 75, marked: 0},
	})
}

// TestSeed001ScenarioCOnNodes: busy rises to 88 before d: 10 taints are
// removed; the 10 still tainted go at d.
func TestSeed001ScenarioCOnNodes(t *testing.T) {
	unmark := make([]string, 0, 10)
	for i := 100; i < 110; i++ {
		unmark = append(unmark, fmt.Sprintf("gpu-%d", i))
	}
	runSeed001(t, []step{
		{at: 0, busy: 80, target: 100, mark: ids(119, 100), nodes: 120, marked: 20},
		{at: d / 2, busy: 88, target: 110, unmark: unmark, nodes: 120, marked: 10},
		{at: d, busy: -1, target: 110, delete: ids(119, 110), nodes: 110, marked: 0},
	})
}

func TestSetAndClearMark(t *testing.T) {
	base := []corev1.Taint{{Key: "a", Effect: corev1.TaintEffectNoSchedule}}
	t1 := time.Unix(1000, 0)
	once := demand.SetMark(base, t1)
	twice := demand.SetMark(once, t1.Add(time.Minute))
	if len(base) != 1 || len(once) != 2 || len(twice) != 2 || !demand.Mark(&corev1.Node{Spec: corev1.NodeSpec{Taints: twice}}).Equal(t1.Add(time.Minute)) {
		t.Fatalf("base %v once %v twice %v", base, once, twice)
	}
	if cleared := demand.ClearMark(twice); len(cleared) != 1 || cleared[0].Key != "a" {
		t.Fatalf("cleared %v", cleared)
	}
}
