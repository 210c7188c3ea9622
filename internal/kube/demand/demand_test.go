package demand

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
)

func rl(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

type podOpt func(*corev1.Pod)

func pod(name string, req corev1.ResourceList, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func on(node string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning}
	}
}

func daemon(p *corev1.Pod) {
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", APIVersion: "apps/v1"}}
}

func selector(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{k: v} }
}

func tolerate(tols ...corev1.Toleration) podOpt {
	return func(p *corev1.Pod) { p.Spec.Tolerations = tols }
}

func affinity(terms ...corev1.NodeSelectorTerm) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
}

func expr(key string, op corev1.NodeSelectorOperator, vals ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: vals}}}
}

var (
	gpuPool = Pool{Name: "gpu", Labels: map[string]string{PoolLabel: "gpu", "accelerator": "nvidia", "gen": "9"},
		Taints: []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: NoSchedule},
			{Key: "soft", Effect: PreferNoSchedule}},
		Offerings: []capacity.Offering{{Type: "g8", Resources: capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8,
			Extended: map[string]int64{"example.com/fpga": 1}}}}}
	cpuPool = Pool{Name: "cpu", Labels: map[string]string{PoolLabel: "cpu"},
		Offerings: []capacity.Offering{{Type: "c4", Resources: capacity.Resources{MilliCPU: 4000, Memory: 16 << 30}}}}
	tolGPU = corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
)

func TestMatch(t *testing.T) {
	gpu := rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "1")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string // "" for a match, else a fragment of the reason
	}{
		{"tolerates and fits", pod("a", gpu, tolerate(tolGPU)), ""},
		{"untolerated taint", pod("a", gpu), "taint nvidia.com/gpu=present:NoSchedule is not tolerated"},
		{"equal toleration", pod("a", gpu, tolerate(corev1.Toleration{Key: "nvidia.com/gpu", Value: "present"})), ""},
		{"equal toleration wrong value", pod("a", gpu, tolerate(corev1.Toleration{Key: "nvidia.com/gpu", Value: "no"})), "not tolerated"},
		{"toleration of another effect", pod("a", gpu, tolerate(corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})), "not tolerated"},
		{"tolerate everything", pod("a", gpu, tolerate(corev1.Toleration{Operator: corev1.TolerationOpExists})), ""},
		{"selector matches", pod("a", gpu, tolerate(tolGPU), selector("accelerator", "nvidia")), ""},
		{"selector mismatch", pod("a", gpu, tolerate(tolGPU), selector("accelerator", "amd")), "node selector accelerator=amd"},
		{"affinity In", pod("a", gpu, tolerate(tolGPU), affinity(expr("accelerator", corev1.NodeSelectorOpIn, "amd", "nvidia"))), ""},
		{"affinity NotIn", pod("a", gpu, tolerate(tolGPU), affinity(expr("accelerator", corev1.NodeSelectorOpNotIn, "nvidia"))), "required node affinity"},
		{"affinity ORed terms", pod("a", gpu, tolerate(tolGPU), affinity(expr("x", corev1.NodeSelectorOpExists), expr("gen", corev1.NodeSelectorOpGt, "8"))), ""},
		{"affinity Lt", pod("a", gpu, tolerate(tolGPU), affinity(expr("gen", corev1.NodeSelectorOpLt, "8"))), "required node affinity"},
		{"affinity DoesNotExist", pod("a", gpu, tolerate(tolGPU), affinity(expr("spot", corev1.NodeSelectorOpDoesNotExist))), ""},
		{"affinity by field", pod("a", gpu, tolerate(tolGPU), affinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}})), "required node affinity"},
		{"too many gpus", pod("a", rl("nvidia.com/gpu", "9"), tolerate(tolGPU)), "fit no offering"},
		{"too much memory", pod("a", rl("memory", "300Gi"), tolerate(tolGPU)), "fit no offering"},
		{"too much cpu", pod("a", rl("cpu", "33"), tolerate(tolGPU)), "fit no offering"},
		{"extended fits", pod("a", rl("example.com/fpga", "1"), tolerate(tolGPU)), ""},
		{"extended missing", pod("a", rl("example.com/asic", "1"), tolerate(tolGPU)), "fit no offering"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := Match(&gpuPool, tc.pod)
			if tc.want == "" && !ok {
				t.Fatalf("no match: %s", why)
			}
			if tc.want != "" && (ok || !strings.Contains(why, tc.want)) {
				t.Fatalf("match=%v why=%q, want reason with %q", ok, why, tc.want)
			}
		})
	}
}

func TestRequests(t *testing.T) {
	p := pod("a", rl("cpu", "500m", "memory", "1Gi", "nvidia.com/gpu", "1", "ephemeral-storage", "1Gi", "hugepages-2Mi", "2Mi"))
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "250m", "example.com/fpga", "2")}})
	p.Spec.InitContainers = []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "2", "memory", "100Mi")}}}
	p.Spec.Overhead = rl("cpu", "100m", "memory", "64Mi")
	got := Requests(p)
	want := capacity.Resources{MilliCPU: 2100, Memory: 1<<30 + 64<<20, GPUs: 1, Extended: map[string]int64{"example.com/fpga": 2}}
	if !got.Equal(want) {
		t.Fatalf("Requests = %v, want %v", got, want)
	}
	if back := Resources(ResourceList(want)); !back.Equal(want) {
		t.Fatalf("round trip = %v", back)
	}
}

func TestUnschedulable(t *testing.T) {
	bound := pod("b", nil, on("n1"))
	other := pod("o", nil)
	other.Status.Conditions[0].Reason = "SchedulerError"
	fresh := pod("f", nil)
	fresh.Status.Conditions = nil
	done := pod("d", nil)
	done.Status.Phase = corev1.PodFailed
	gone := pod("g", nil)
	gone.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want bool
	}{{pod("u", nil), true}, {bound, false}, {other, false}, {fresh, false}, {done, false}, {gone, false}} {
		if got := Unschedulable(tc.pod); got != tc.want {
			t.Errorf("%s: Unschedulable = %v, want %v", tc.pod.Name, got, tc.want)
		}
	}
}

func node(name, pool string, ordinal int, alloc corev1.ResourceList, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{PoolLabel: pool},
		Annotations: map[string]string{OrdinalAnnotation: fmt.Sprint(ordinal)}},
		Spec: corev1.NodeSpec{Taints: taints}, Status: corev1.NodeStatus{Allocatable: alloc}}
}

func TestCompute(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	g8 := rl("cpu", "32", "memory", "256Gi", "nvidia.com/gpu", "8")
	nodes := []*corev1.Node{
		node("gpu-1", "gpu", 1, g8, MarkTaint(t0)),
		node("gpu-0", "gpu", 0, g8),
		node("cpu-0", "cpu", 0, rl("cpu", "4", "memory", "16Gi")),
		node("other", "elsewhere", 0, g8),
	}
	one := rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "1")
	two := rl("cpu", "2", "memory", "1Gi", "nvidia.com/gpu", "2")
	pods := []*corev1.Pod{
		pod("run", one, on("gpu-0")),
		pod("ds", rl("cpu", "100m"), on("gpu-1"), daemon),
		pod("finished", one, on("gpu-0"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("elsewhere", one, on("other")),
		pod("w1", one, tolerate(tolGPU)),
		pod("w2", one, tolerate(tolGPU)),
		pod("w3", two, tolerate(tolGPU)),
		pod("small", rl("cpu", "1")), // no toleration: the cpu pool serves it
		pod("huge", rl("nvidia.com/gpu", "16"), tolerate(tolGPU)),
		pod("bound-pending", one, func(p *corev1.Pod) { p.Spec.NodeName = "gpu-0" }),
	}
	// gpu-0 is cordoned: its free GPUs are no room for the waiting pods
	// (TestComputeRoom covers room).
	nodes[1].Spec.Unschedulable = true
	rep := Compute([]Pool{gpuPool, cpuPool}, nodes, pods)

	g := rep.Pressure["gpu"]
	if len(g.Nodes) != 2 || g.Nodes[0].ID != "gpu-0" || g.Nodes[1].ID != "gpu-1" {
		t.Fatalf("gpu nodes = %+v", g.Nodes)
	}
	if !g.Nodes[1].MarkedAt.Equal(t0) || !g.Nodes[0].MarkedAt.IsZero() {
		t.Fatalf("marks = %v, %v", g.Nodes[0].MarkedAt, g.Nodes[1].MarkedAt)
	}
	// gpu-0 runs "run" and the pending pod bound to it; gpu-1 only a daemon.
	if !g.Nodes[0].Busy() || g.Nodes[1].Busy() || len(g.Nodes[1].Running) != 1 || g.Inflight() != 2 {
		t.Fatalf("running = %+v / %+v", g.Nodes[0].Running, g.Nodes[1].Running)
	}
	if g.Nodes[0].Resources.GPUs != 8 || g.Nodes[0].Free().GPUs != 6 {
		t.Fatalf("gpu-0 resources %v free %v", g.Nodes[0].Resources, g.Nodes[0].Free())
	}
	if g.Queued() != 3 || len(g.Pending) != 2 {
		t.Fatalf("gpu pending = %+v", g.Pending)
	}
	if strings.Join(rep.Pods["gpu"], ",") != "default/w1,default/w2,default/w3" {
		t.Fatalf("gpu pods = %v", rep.Pods["gpu"])
	}
	// "small" fits in cpu-0's room: the scheduler places it next; it counts
	// as running there, not as demand.
	c := rep.Pressure["cpu"]
	if c.Queued() != 0 || len(c.Nodes) != 1 || c.Inflight() != 1 || len(rep.Pods["cpu"]) != 0 {
		t.Fatalf("cpu = %+v", c)
	}
	if len(rep.Unmatched) != 1 || rep.Unmatched[0].Name != "huge" ||
		!strings.Contains(rep.Unmatched[0].Reason, "pool cpu: taint") && !strings.Contains(rep.Unmatched[0].Reason, "pool cpu: requests") ||
		!strings.Contains(rep.Unmatched[0].Reason, "pool gpu: requests cpu=0 mem=0 gpu=16 fit no offering") {
		t.Fatalf("unmatched = %+v", rep.Unmatched)
	}
	if _, ok := rep.Pressure["elsewhere"]; ok {
		t.Fatal("a pool that is not given got a report")
	}

	none := Compute(nil, nodes, pods)
	if len(none.Unmatched) != 5 || !strings.Contains(none.Unmatched[0].Reason, "no NodePool") {
		t.Fatalf("no pools: %+v", none.Unmatched)
	}
}

func TestMarkTaint(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 7, 0, time.UTC)
	n := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{MarkTaint(at)}}}
	if got := Mark(n); !got.Equal(at) {
		t.Fatalf("Mark = %v", got)
	}
	n.Spec.Taints[0].Value = "yesterday"
	if !Mark(n).IsZero() {
		t.Fatal("a bad mark value must read as unmarked")
	}
}

// BenchmarkCompute1000Pending measures one pass over 1,000 unschedulable pods
// and 100 full nodes of two pools (the "1,000 pending pods in one loop"
// figure; the nodes are full, so that every pod is demand).
func BenchmarkCompute1000Pending(b *testing.B) {
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for i := range 100 {
		nodes = append(nodes, node(fmt.Sprintf("gpu-%d", i), "gpu", i, rl("cpu", "32", "memory", "256Gi", "nvidia.com/gpu", "8")))
		pods = append(pods, pod(fmt.Sprintf("r%d", i), rl("cpu", "1", "nvidia.com/gpu", "8"), on(fmt.Sprintf("gpu-%d", i))))
	}
	for i := range 1000 {
		pods = append(pods, pod(fmt.Sprintf("p%d", i), rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "1"), tolerate(tolGPU)))
	}
	pools := []Pool{gpuPool, cpuPool}
	b.ReportAllocs()
	for b.Loop() {
		rep := Compute(pools, nodes, pods)
		if g := rep.Pressure["gpu"]; g.Queued() != 1000 {
			b.Fatal("lost pods")
		}
	}
}

// TestComputeRoom: a waiting pod that fits in the room left on a schedulable,
// unmarked Node of its pool is not demand (the scheduler places it on its
// next try); room is taken first fit, so only what does not fit is pending.
func TestComputeRoom(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	g8 := rl("cpu", "32", "memory", "256Gi", "nvidia.com/gpu", "8")
	two := rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "2")
	nodes := []*corev1.Node{node("gpu-0", "gpu", 0, g8), node("gpu-1", "gpu", 1, g8, MarkTaint(t0))}
	pods := []*corev1.Pod{pod("run", two, on("gpu-0"))}
	for i := range 5 {
		pods = append(pods, pod(fmt.Sprintf("w%d", i), two, tolerate(tolGPU)))
	}
	rep := Compute([]Pool{gpuPool}, nodes, pods)
	// gpu-0 has 6 GPUs left: w0..w2 fit and count as running there;
	// gpu-1 is marked: no room there, it stays empty.
	g := rep.Pressure["gpu"]
	if g.Queued() != 2 || strings.Join(rep.Pods["gpu"], ",") != "default/w3,default/w4" {
		t.Fatalf("pending %+v pods %v", g.Pending, rep.Pods["gpu"])
	}
	if len(g.Nodes[0].Running) != 4 || g.Nodes[0].Free().GPUs != 0 || g.Nodes[1].Busy() {
		t.Fatalf("nodes %+v", g.Nodes)
	}
}

// TestComputeRoutesToTheCheapestPool (issue 35): an unschedulable pod that
// two NodePools fit is the demand of the cheaper one (before: the first in
// name order), of the heavier one with a weight, and overflows to the next
// when the chosen one's next node would cross its limits (counting the
// pods already counted on it in the pass) or it says it is short.
func TestComputeRoutesToTheCheapestPool(t *testing.T) {
	c4 := capacity.Resources{MilliCPU: 4000, Memory: 16 << 30}
	offer := func(price float64) []capacity.Offering {
		return []capacity.Offering{{Type: "c4", Resources: c4, PricePerHour: price}}
	}
	od := Pool{Name: "a-od", Labels: map[string]string{PoolLabel: "a-od"}, Offerings: offer(0.40)}
	spot := Pool{Name: "b-spot", Labels: map[string]string{PoolLabel: "b-spot"}, Offerings: offer(0.10)}
	three := []*corev1.Pod{pod("p1", rl("cpu", "3")), pod("p2", rl("cpu", "3")), pod("p3", rl("cpu", "3"))}
	eight := int64(8000)
	limited := spot
	limited.Limits = policy.Limits{MilliCPU: &eight}
	heldOne := limited
	heldOne.Held = policy.Held{Nodes: 1, Resources: c4}
	heavy := od
	heavy.Weight = 10
	shortSpot := spot
	shortSpot.Short = "at its max of 2 nodes with 4 queued"
	for _, c := range []struct {
		name  string
		pools []Pool
		want  map[string]int
	}{
		{"the cheaper, second in name order", []Pool{od, spot}, map[string]int{"b-spot": 3}},
		{"the heavier beats the cheaper", []Pool{heavy, spot}, map[string]int{"a-od": 3}},
		{"limits.cpu 8 takes two 4-CPU nodes' worth, the third overflows", []Pool{od, limited}, map[string]int{"b-spot": 2, "a-od": 1}},
		{"a machine on its way (held, no Node yet) takes the first; one more node fits, the third overflows", []Pool{od, heldOne},
			map[string]int{"b-spot": 2, "a-od": 1}},
		{"a pool short of room overflows", []Pool{od, shortSpot}, map[string]int{"a-od": 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := Compute(c.pools, nil, three)
			got := map[string]int{}
			for name, pr := range rep.Pressure {
				if q := pr.Queued(); q > 0 {
					got[name] = q
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("demand %v, want %v", got, c.want)
			}
		})
	}
	// The held machine is a full Node: it holds none of them, one more
	// node takes the first, the other two overflow.
	full := []*corev1.Node{node("b-spot-0", "b-spot", 0, rl("cpu", "4", "memory", "16Gi"))}
	busy := append([]*corev1.Pod{pod("busy", rl("cpu", "4"), on("b-spot-0"))}, three...)
	rep := Compute([]Pool{od, heldOne}, full, busy)
	sp, o := rep.Pressure["b-spot"], rep.Pressure["a-od"]
	if sp.Queued() != 1 || o.Queued() != 2 {
		t.Errorf("held machine joined and full: spot %d, od %d queued; want 1 and 2", sp.Queued(), o.Queued())
	}
	// Room on a Node of the dearer pool: the pod is placed there, not demand.
	nodes := []*corev1.Node{node("a-od-0", "a-od", 0, rl("cpu", "4", "memory", "16Gi"))}
	rep = Compute([]Pool{od, spot}, nodes, three[:1])
	sp, o = rep.Pressure["b-spot"], rep.Pressure["a-od"]
	if sp.Queued() != 0 || o.Inflight() != 1 {
		t.Errorf("with room on a-od-0: %+v", rep.Pressure)
	}
}
