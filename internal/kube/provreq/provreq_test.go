package provreq

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/policy"
)

func rl(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func spec(req corev1.ResourceList, selector map[string]string) corev1.PodSpec {
	return corev1.PodSpec{NodeSelector: selector,
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
		Containers:  []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: req}}}}
}

func template(name string, s corev1.PodSpec) *corev1.PodTemplate {
	return &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: s}}
}

var (
	gpu8   = rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "8")
	gpu4   = rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "4")
	g8node = capacity.Resources{MilliCPU: 32000, Memory: 256 << 30, GPUs: 8}
	g8     = capacity.Offering{Type: "g8", Resources: g8node, PricePerHour: 24.5}
)

func TestParse(t *testing.T) {
	obj := map[string]any{
		"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
		"metadata": map[string]any{"name": "train", "namespace": "ml", "uid": "u1", "generation": int64(2),
			"creationTimestamp": "2026-01-02T03:04:05Z"},
		"spec": map[string]any{"provisioningClassName": ClassAtomicScaleUp,
			"podSets":    []any{map[string]any{"podTemplateRef": map[string]any{"name": "a"}, "count": int64(3)}, map[string]any{"podTemplateRef": map[string]any{"name": "b"}, "count": int64(1)}},
			"parameters": map[string]any{"ValidUntilSeconds": "600"}},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "lastTransitionTime": "2026-01-02T03:04:06Z"}}},
	}
	r, err := Parse(obj)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key() != "ml/train" || r.Class != ClassAtomicScaleUp || r.Total() != 4 || len(r.PodSets) != 2 || r.PodSets[1] != (PodSet{"b", 1}) ||
		r.Parameters[ValidUntilSeconds] != "600" || r.Generation != 2 || len(r.Conditions) != 1 || r.Created.Unix() != 1767323045 {
		t.Fatalf("parsed %+v", r)
	}
	for field, mutate := range map[string]func(m map[string]any){
		"spec.podSets:": func(m map[string]any) { m["podSets"] = []any{} },
		"spec.podSets[0].count": func(m map[string]any) {
			m["podSets"] = []any{map[string]any{"podTemplateRef": map[string]any{"name": "a"}, "count": int64(0)}}
		},
		"spec.podSets[0].podTemplateRef.name": func(m map[string]any) {
			m["podSets"] = []any{map[string]any{"podTemplateRef": map[string]any{}, "count": int64(1)}}
		},
	} {
		bad := map[string]any{"metadata": map[string]any{"name": "x", "namespace": "ml"}, "spec": map[string]any{"provisioningClassName": ClassCheckCapacity}}
		mutate(bad["spec"].(map[string]any))
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v does not name the field", field, err)
		}
	}
	if !Supported(ClassCheckCapacity) || !Supported(ClassAtomicScaleUp) || Supported("queued-provisioning.gke.io") {
		t.Error("Supported")
	}
}

// Pod sets become one gang of unschedulable stand-ins, less the bound
// consumers (taken from the pod set whose requests they match).
func TestPods(t *testing.T) {
	r := &Request{Namespace: "ml", Name: "train", UID: "u", Class: ClassAtomicScaleUp,
		PodSets: []PodSet{{"big", 3}, {"half", 2}}}
	tmpl := map[string]*corev1.PodTemplate{"big": template("big", spec(gpu8, nil)), "half": template("half", spec(gpu4, nil))}
	if _, _, missing := Pods(r, map[string]*corev1.PodTemplate{"big": tmpl["big"]}, nil); !strings.Contains(missing, "half") {
		t.Fatalf("missing = %q, want the half template named", missing)
	}
	consumer := func(name, node string, req corev1.ResourceList) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", Annotations: map[string]string{ConsumeAnnotation: "train"}},
			Spec: spec(req, nil)}
		p.Spec.NodeName = node
		return p
	}
	cons := []*corev1.Pod{consumer("h0", "n1", gpu4), consumer("b0", "n2", gpu8), consumer("w", "", gpu8)}
	pods, bound, missing := Pods(r, tmpl, cons)
	if missing != "" || bound != 2 || len(pods) != 3 {
		t.Fatalf("%d stand-ins, %d bound, missing %q; want 3, 2", len(pods), bound, missing)
	}
	var big, half int
	for _, p := range pods {
		if !demand.Unschedulable(p) {
			t.Fatalf("stand-in %s is not unschedulable", p.Name)
		}
		if g, size := demand.Gang(p); g != "ml/provreq:train" || size != 3 {
			t.Fatalf("stand-in gang %q size %d", g, size)
		}
		if key, ok := StandIn(p.Namespace + "/" + p.Name); !ok || key != "ml/train" {
			t.Fatalf("StandIn(%s) = %q %v", p.Name, key, ok)
		}
		switch demand.Requests(p).GPUs {
		case 8:
			big++
		case 4:
			half++
		}
		if p.Labels["app"] == "" {
			t.Fatalf("stand-in %s lacks its template's labels", p.Name)
		}
	}
	if big != 2 || half != 1 {
		t.Fatalf("%d big and %d half stand-ins, want 2 and 1", big, half)
	}
	if _, ok := StandIn("ml/train-0"); ok {
		t.Fatal("a real pod taken for a stand-in")
	}
	if Consumes(cons[0]) != "train" || Consumes(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{LegacyConsumeAnnotation: "x"}}}) != "x" {
		t.Fatal("Consumes")
	}
}

// A request's stand-ins are one gang demand (both pod sets, one gang) and
// the tide policy buys all their nodes in one decision.
func TestStandInsAreOneGang(t *testing.T) {
	r := &Request{Namespace: "ml", Name: "train", Class: ClassAtomicScaleUp, PodSets: []PodSet{{"big", 3}, {"half", 2}}}
	tmpl := map[string]*corev1.PodTemplate{"big": template("big", spec(gpu8, nil)), "half": template("half", spec(gpu4, nil))}
	pods, _, _ := Pods(r, tmpl, nil)
	pool := demand.Pool{Name: "gpu", Offerings: []capacity.Offering{g8}}
	rep := demand.Compute([]demand.Pool{pool}, nil, pods)
	pr := rep.Pressure["gpu"]
	if len(pr.Pending) != 2 || pr.Pending[0].Gang != "ml/provreq:train" || pr.Pending[1].Gang != pr.Pending[0].Gang ||
		pr.Pending[0].Count+pr.Pending[1].Count != 5 || len(rep.Pods["gpu"]) != 5 {
		t.Fatalf("pending %+v, pods %v: want one gang of 3 + 2", pr.Pending, rep.Pods["gpu"])
	}
	cfg := policy.Config{Policy: "tide", Nodes: capacity.Elastic(0, 20), Offerings: []capacity.Offering{g8}}
	p, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	in := policy.Input{Now: now, Pressure: pr}
	d := p.Decide(in)
	for range 3 { // past the batch window
		in.Now, in.State, in.Desired = in.Now.Add(time.Minute), d.State, d.Desired
		d = p.Decide(in)
	}
	if d.Desired != 4 { // 3 × 8 GPUs + 2 × 4 GPUs: 4 eight-GPU nodes
		t.Fatalf("desired %d (%s), want 4 in one decision", d.Desired, d.Reason)
	}
	// Without a pool that admits them, every stand-in is unmatched.
	other := demand.Pool{Name: "cpu", Labels: map[string]string{"tier": "cpu"}, Offerings: []capacity.Offering{g8},
		Taints: []demand.Taint{{Key: "dedicated", Value: "cpu", Effect: demand.NoSchedule}}}
	if rep := demand.Compute([]demand.Pool{other}, nil, pods); len(rep.Unmatched) != 5 || len(rep.Pressure["cpu"].Pending) != 0 {
		t.Fatalf("unmatched %v, pending %+v", rep.Unmatched, rep.Pressure["cpu"].Pending)
	}
}

func node(name, pool string, alloc corev1.ResourceList, ready bool, mods ...func(*corev1.Node)) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{demand.PoolLabel: pool, "accelerator": "nvidia"}},
		Status: corev1.NodeStatus{Allocatable: alloc, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
	for _, m := range mods {
		m(n)
	}
	return n
}

// The room is the free capacity of Ready, schedulable, unmarked Nodes that
// the pods' rules allow; Place is all or nothing and books only when told.
func TestRoom(t *testing.T) {
	g8l := rl("cpu", "32", "memory", "256Gi", "nvidia.com/gpu", "8")
	nodes := []*corev1.Node{
		node("a", "gpu", g8l, true),
		node("b", "gpu", g8l, true),
		node("c", "gpu", g8l, false), // not Ready
		node("d", "gpu", g8l, true, func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node("e", "gpu", g8l, true, func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{demand.MarkTaint(time.Unix(5, 0))} }),
		node("f", "gpu", g8l, true, func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}}
		}),
		node("g", "other", g8l, true, func(n *corev1.Node) { n.Labels["accelerator"] = "amd" }),
	}
	busy := &corev1.Pod{Spec: spec(gpu4, nil)}
	busy.Spec.NodeName = "b"
	done := &corev1.Pod{Spec: spec(gpu8, nil), Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	done.Spec.NodeName = "a"
	room := NewRoom(nodes, []*corev1.Pod{busy, done})
	mk := func(n int, req corev1.ResourceList) []*corev1.Pod {
		var out []*corev1.Pod
		for range n {
			out = append(out, &corev1.Pod{Spec: spec(req, map[string]string{"accelerator": "nvidia"})})
		}
		return out
	}
	// a has 8 GPUs free, b 4: two 8-GPU pods do not fit, one does and
	// one 4-GPU beside it.
	if _, ok := room.Place(mk(2, gpu8), nil); ok {
		t.Fatal("two 8-GPU pods fit a Node and a half")
	}
	book, ok := room.Place(append(mk(1, gpu8), mk(1, gpu4)...), nil)
	if !ok {
		t.Fatal("an 8-GPU and a 4-GPU pod do not fit a and b")
	}
	if _, ok := room.Place(mk(1, gpu4), nil); !ok {
		t.Fatal("room booked before book() was called")
	}
	if booked := book(); len(booked) != 2 || booked[0].Name != "a" || booked[1].Name != "b" {
		t.Fatalf("booked %v, want a and b", booked)
	}
	if _, ok := room.Place(mk(1, gpu4), nil); ok {
		t.Fatal("room left after booking all of it")
	}
	// on limits the Nodes.
	room = NewRoom(nodes, nil)
	if _, ok := room.Place(mk(1, gpu8), func(n *corev1.Node) bool { return n.Name == "c" || n.Name == "d" }); ok {
		t.Fatal("a pod placed on a NotReady or cordoned Node")
	}
	if _, ok := room.Place(mk(3, gpu8), nil); ok {
		t.Fatal("three 8-GPU pods placed: a marked, tainted or unmatched Node was counted")
	}
}

// Never names, pool by pool, why no pool can hold the pods at once.
func TestNever(t *testing.T) {
	gpus := int64(16)
	pools := []Pool{
		{Pool: demand.Pool{Name: "small", Labels: map[string]string{"accelerator": "nvidia"}, Offerings: []capacity.Offering{g8}}, Max: 2},
		{Pool: demand.Pool{Name: "limited", Labels: map[string]string{"accelerator": "nvidia"}, Offerings: []capacity.Offering{g8},
			Limits: policy.Limits{GPUs: &gpus}}, Max: 10},
		{Pool: demand.Pool{Name: "amd", Labels: map[string]string{"accelerator": "amd"}, Offerings: []capacity.Offering{g8}}, Max: 10},
	}
	mk := func(n int, req corev1.ResourceList) []*corev1.Pod {
		var out []*corev1.Pod
		for range n {
			out = append(out, &corev1.Pod{Spec: spec(req, map[string]string{"accelerator": "nvidia"})})
		}
		return out
	}
	why := Never(pools, mk(3, gpu8))
	for _, want := range []string{"pool small: 3 pods need more than its max of 2 nodes", "pool limited: 3 pods need 3 or more nodes, past limits.gpus 16",
		"pool amd: node selector accelerator=nvidia"} {
		if !strings.Contains(why, want) {
			t.Errorf("Never = %q, lacks %q", why, want)
		}
	}
	if why := Never(pools, mk(2, gpu8)); why != "" {
		t.Errorf("2 pods fit small: Never = %q", why)
	}
	if why := Never(pools, append(mk(1, gpu8), mk(2, gpu4)...)); why != "" {
		t.Errorf("1 × 8 + 2 × 4 GPUs fit 2 nodes of small: Never = %q", why)
	}
	if why := Never(pools[:2], append(mk(2, gpu8), mk(2, gpu4)...)); !strings.Contains(why, "max of 2") || !strings.Contains(why, "limits.gpus") {
		t.Errorf("2 × 8 + 2 × 4 GPUs need 3 nodes: Never = %q", why)
	}
	if why := Never(pools, mk(1, rl("nvidia.com/gpu", "16"))); !strings.Contains(why, "fit no offering") {
		t.Errorf("Never = %q for a 16-GPU pod", why)
	}
	if Never(nil, mk(1, gpu8)) != "no NodePool exists" {
		t.Error("Never without pools")
	}
	if !Admitted(pools, mk(3, gpu8)) || Admitted(pools[2:], mk(1, gpu8)) {
		t.Error("Admitted")
	}
}

// Templates take their PriorityClass's value (or the global default's),
// and the stand-ins carry it into the demand.
func TestResolvePriorities(t *testing.T) {
	withClass := func(name, class string) corev1.PodTemplate {
		tp := *template(name, spec(gpu8, nil))
		tp.Template.Spec.PriorityClassName = class
		return tp
	}
	set := int32(7)
	explicit := withClass("explicit", "high")
	explicit.Template.Spec.Priority = &set
	ts := []corev1.PodTemplate{withClass("high", "high"), withClass("plain", ""), withClass("ghost", "nope"), explicit}
	ResolvePriorities(ts, []schedulingv1.PriorityClass{{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000},
		{ObjectMeta: metav1.ObjectMeta{Name: "normal"}, Value: 10, GlobalDefault: true}})
	want := []any{int32(1000), int32(10), nil, int32(7)}
	for i, tp := range ts {
		var got any
		if p := tp.Template.Spec.Priority; p != nil {
			got = *p
		}
		if got != want[i] {
			t.Errorf("%s: priority %v, want %v", tp.Name, got, want[i])
		}
	}
	r := &Request{Namespace: "ml", Name: "r", PodSets: []PodSet{{"high", 2}}}
	pods, _, _ := Pods(r, map[string]*corev1.PodTemplate{"high": &ts[0]}, nil)
	rep := demand.Compute([]demand.Pool{{Name: "gpu", Offerings: []capacity.Offering{g8}}}, nil, pods)
	if pr := rep.Pressure["gpu"]; len(pr.Pending) != 1 || pr.Pending[0].Priority != 1000 {
		t.Fatalf("pending %+v, want the gang at priority 1000", pr.Pending)
	}
}
