package demand

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/binpack"
	"github.com/tide-project/tide/internal/capacity"
)

// zonal is a pool of 4-CPU nodes in zones a, b and c (the offerings listed
// in that order).
func zonal(zones ...string) Pool {
	p := Pool{Name: "z", Labels: map[string]string{PoolLabel: "z"}}
	for _, z := range zones {
		p.Offerings = append(p.Offerings, capacity.Offering{Type: "c4", Zone: z, PricePerHour: 1,
			Resources: capacity.Resources{MilliCPU: 4000, Memory: 16 << 30}})
	}
	return p
}

func labelled(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func antiHost(app string) podOpt {
	return podAffinity(true, corev1.LabelHostname, app)
}

func podAffinity(anti bool, key, app string) podOpt {
	return func(p *corev1.Pod) {
		t := []corev1.PodAffinityTerm{{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		if anti {
			p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: t}
		} else {
			p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: t}
		}
	}
}

func spread(key string, skew int32, app string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: skew, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}})
	}
}

func hostPort(port int32) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 80, HostPort: port})
	}
}

// newNodes packs the report's demand for pool p onto its offerings as a
// policy does (binpack.Buy over Augment) and returns the new nodes by
// offering index.
func newNodes(t *testing.T, p Pool, rep Report) []int {
	t.Helper()
	pr := rep.Pressure[p.Name]
	res := binpack.Buy(pr.Pending, Augment(p.Offerings, rep.Slots[p.Name]), binpack.BuyOptions{MaxNodes: -1})
	if res.UnplacedTotal != 0 {
		t.Fatalf("unplaced: %v (pending %+v)", res.Unplaced, pr.Pending)
	}
	return res.Counts
}

func sum(c []int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func many(n int, name string, req corev1.ResourceList, opts ...podOpt) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, pod(name+string(rune('0'+i)), req, opts...))
	}
	return out
}

func TestTopologyNodeCounts(t *testing.T) {
	small := rl("cpu", "500m", "memory", "256Mi")
	for _, tc := range []struct {
		name  string
		pool  Pool
		pods  []*corev1.Pod
		nodes []*corev1.Node
		want  []int // new nodes by offering
	}{
		{"no rules: one node", zonal("a"), many(4, "w", small, labelled("app", "web")), nil, []int{1}},
		{"hostname anti-affinity: one node each", zonal("a"), many(3, "w", small, labelled("app", "web"), antiHost("web")), nil, []int{3}},
		{"anti-affinity with another app: no constraint among themselves", zonal("a"), many(3, "w", small, labelled("app", "web"), antiHost("db")), nil, []int{1}},
		{"two anti-affine apps share nodes", zonal("a"),
			append(many(3, "w", small, labelled("app", "web"), antiHost("web")), many(3, "d", small, labelled("app", "db"), antiHost("db"))...), nil, []int{3}},
		{"zone spread over two zones", zonal("a", "b"), many(4, "w", small, labelled("app", "web"), spread(corev1.LabelTopologyZone, 1, "web")), nil, []int{1, 1}},
		{"zone spread over three zones", zonal("a", "b", "c"), many(3, "w", small, labelled("app", "web"), spread(corev1.LabelTopologyZone, 1, "web")), nil, []int{1, 1, 1}},
		{"zone spread, skew 2, two pods: one zone", zonal("a", "b"), many(2, "w", small, labelled("app", "web"), spread(corev1.LabelTopologyZone, 2, "web")), nil, []int{1, 0}},
		{"zone spread counts running pods", zonal("a", "b"),
			append(many(2, "w", small, labelled("app", "web"), spread(corev1.LabelTopologyZone, 1, "web")),
				pod("r1", small, labelled("app", "web"), on("na")), pod("r2", small, labelled("app", "web"), on("na"))),
			[]*corev1.Node{znode("na", "z", "0", rl("cpu", "1", "memory", "1Gi"), zoneOf("a"))}, []int{0, 1}},
		{"hostname spread skew 2", zonal("a"), many(5, "w", small, labelled("app", "web"), spread(corev1.LabelHostname, 2, "web")), nil, []int{3}},
		{"host port conflict: its own node", zonal("a"),
			[]*corev1.Pod{pod("p1", small, hostPort(8080)), pod("p2", small, hostPort(8080)), pod("p3", small)}, nil, []int{2}},
		{"different host ports share a node", zonal("a"),
			[]*corev1.Pod{pod("p1", small, hostPort(8080)), pod("p2", small, hostPort(8081))}, nil, []int{1}},
		{"hostname affinity: one node for the group", zonal("a", "b"), many(3, "w", rl("cpu", "1"), labelled("app", "web"), podAffinity(false, corev1.LabelHostname, "web")), nil, []int{1, 0}},
		{"zone affinity: one zone", zonal("a", "b"), many(6, "w", rl("cpu", "1"), labelled("app", "web"), podAffinity(false, corev1.LabelTopologyZone, "web")), nil, []int{2, 0}},
		{"zone selector: only that zone's offering", zonal("a", "b"), many(2, "w", small, selector(corev1.LabelTopologyZone, "b")), nil, []int{0, 1}},
		{"instance type selector", zonal("a"), many(1, "w", small, selector(corev1.LabelInstanceTypeStable, "c4")), nil, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Compute([]Pool{tc.pool}, tc.nodes, tc.pods)
			if len(rep.Unmatched) > 0 || len(rep.Unmodelled) > 0 {
				t.Fatalf("unmatched %+v unmodelled %+v", rep.Unmatched, rep.Unmodelled)
			}
			if got := newNodes(t, tc.pool, rep); !slices.Equal(got, tc.want) {
				t.Fatalf("new nodes by offering = %v, want %v (pending %+v, slots %+v)", got, tc.want, rep.Pressure[tc.pool.Name].Pending, rep.Slots[tc.pool.Name])
			}
		})
	}
}

func zoneOf(z string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = z }
}

// znode is a schedulable Node of pool with allocatable alloc.
func znode(name, pool, ordinal string, alloc corev1.ResourceList, opts ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{PoolLabel: pool, corev1.LabelHostname: name},
		Annotations: map[string]string{OrdinalAnnotation: ordinal}}, Status: corev1.NodeStatus{Allocatable: alloc}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func TestTopologyRoom(t *testing.T) {
	small := rl("cpu", "500m", "memory", "256Mi")
	p := zonal("a")
	n1 := znode("n1", "z", "0", rl("cpu", "4", "memory", "16Gi"))
	running := pod("r", small, labelled("app", "web"), on("n1"))
	// A web pod with hostname anti-affinity may not join the running web
	// pod; a pod without rules takes the room.
	pods := []*corev1.Pod{running, pod("w1", small, labelled("app", "web"), antiHost("web")), pod("x", small)}
	rep := Compute([]Pool{p}, []*corev1.Node{n1}, pods)
	if got := rep.Pods["z"]; !slices.Equal(got, []string{"default/w1"}) {
		t.Fatalf("demand %v, want only w1", got)
	}
	if got := len(rep.Pressure["z"].Nodes[0].Running); got != 2 {
		t.Fatalf("n1 runs %d, want 2 (r and x placed)", got)
	}
	// The running pod's own anti-affinity refuses a web newcomer without
	// rules, not another app.
	running2 := pod("r", small, labelled("app", "web"), antiHost("web"), on("n1"))
	rep = Compute([]Pool{p}, []*corev1.Node{n1}, []*corev1.Pod{running2, pod("w2", small, labelled("app", "web")), pod("y", small, labelled("app", "db"))})
	if got := rep.Pods["z"]; !slices.Equal(got, []string{"default/w2"}) {
		t.Fatalf("demand %v, want only w2", got)
	}
	// A host port in use on the Node: a new node.
	rep = Compute([]Pool{p}, []*corev1.Node{n1}, []*corev1.Pod{pod("r", small, hostPort(9000), on("n1")), pod("q", small, hostPort(9000)), pod("s", small, hostPort(9001))})
	if got := rep.Pods["z"]; !slices.Equal(got, []string{"default/q"}) {
		t.Fatalf("demand %v, want only q", got)
	}
	// A zone selector keeps a pod off a Node in another zone.
	nb := znode("nb", "z", "0", rl("cpu", "4", "memory", "16Gi"), zoneOf("b"))
	rep = Compute([]Pool{zonal("a", "b")}, []*corev1.Node{nb}, []*corev1.Pod{pod("q", small, selector(corev1.LabelTopologyZone, "a"))})
	if got := rep.Pods["z"]; !slices.Equal(got, []string{"default/q"}) {
		t.Fatalf("demand %v, want q (its zone has no Node)", got)
	}
}

func TestTopologyUnservable(t *testing.T) {
	small := rl("cpu", "500m", "memory", "256Mi")
	// Anti-affinity by zone, two zones, three pods: the third can go nowhere.
	p := zonal("a", "b")
	rep := Compute([]Pool{p}, nil, many(3, "w", small, labelled("app", "web"), podAffinity(true, corev1.LabelTopologyZone, "web")))
	if len(rep.Unmatched) != 1 || !strings.Contains(rep.Unmatched[0].Reason, "leave no zone") {
		t.Fatalf("unmatched %+v, want the third pod", rep.Unmatched)
	}
	if got := newNodes(t, p, rep); !slices.Equal(got, []int{1, 1}) {
		t.Fatalf("new nodes %v, want one per zone", got)
	}
	// A zone spread on a pool whose offerings have no zone.
	rep = Compute([]Pool{zonal("")}, nil, many(1, "w", small, labelled("app", "web"), spread(corev1.LabelTopologyZone, 1, "web")))
	if len(rep.Unmatched) != 1 {
		t.Fatalf("unmatched %+v, want the pod", rep.Unmatched)
	}
	// Affinity to pods that do not exist and that it does not match.
	rep = Compute([]Pool{p}, nil, []*corev1.Pod{pod("w", small, labelled("app", "web"), podAffinity(false, corev1.LabelHostname, "db"))})
	if len(rep.Unmatched) != 1 || !strings.Contains(rep.Unmatched[0].Reason, "no pod it must run beside") {
		t.Fatalf("unmatched %+v", rep.Unmatched)
	}
}

func TestUnmodelled(t *testing.T) {
	small := rl("cpu", "500m", "memory", "256Mi")
	p := zonal("a")
	rack := func(pd *corev1.Pod) {
		pd.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "example.com/rack",
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{}}}
	}
	dra := func(pd *corev1.Pod) {
		pd.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
	}
	soft := func(pd *corev1.Pod) {
		pd.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "example.com/rack",
			WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{}}}
	}
	pods := []*corev1.Pod{pod("rack", small, rack), pod("dra", small, dra), pod("soft", small, soft), pod("plain", small),
		pod("nsel", small, labelled("app", "web"), func(pd *corev1.Pod) {
			antiHost("web")(pd)
			pd.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}
		})}
	rep := Compute([]Pool{p}, nil, pods)
	var got []string
	for _, u := range rep.Unmodelled {
		got = append(got, u.Name)
		if !strings.HasPrefix(u.Reason, "counted by its requests alone") {
			t.Errorf("%s: reason %q", u.Name, u.Reason)
		}
	}
	if !slices.Equal(got, []string{"dra", "nsel", "rack"}) {
		t.Fatalf("unmodelled %v (%+v)", got, rep.Unmodelled)
	}
	if n := len(rep.Pods["z"]); n != 5 {
		t.Fatalf("%d pods counted, want all 5", n)
	}
}

func TestRequestsSidecars(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	c := func(cpu string) corev1.Container {
		return corev1.Container{Name: "c" + cpu, Resources: corev1.ResourceRequirements{Requests: rl("cpu", cpu)}}
	}
	sidecar := func(cpu string) corev1.Container {
		x := c(cpu)
		x.RestartPolicy = &always
		return x
	}
	for _, tc := range []struct {
		name string
		init []corev1.Container
		apps []corev1.Container
		want int64
	}{
		{"init larger than apps", []corev1.Container{c("3")}, []corev1.Container{c("1"), c("1")}, 3000},
		{"apps larger than init", []corev1.Container{c("1")}, []corev1.Container{c("1"), c("1")}, 2000},
		{"sidecar adds to apps", []corev1.Container{sidecar("1")}, []corev1.Container{c("1")}, 2000},
		{"init after a sidecar runs beside it", []corev1.Container{sidecar("1"), c("2")}, []corev1.Container{c("1")}, 3000},
		{"init before the sidecar does not", []corev1.Container{c("2"), sidecar("1")}, []corev1.Container{c("1")}, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tc.init, Containers: tc.apps}}
			if got := Requests(p).MilliCPU; got != tc.want {
				t.Fatalf("cpu %dm, want %dm", got, tc.want)
			}
		})
	}
}

func TestAnyExtendedResource(t *testing.T) {
	p := Pool{Name: "amd", Labels: map[string]string{PoolLabel: "amd"}, Offerings: []capacity.Offering{{Type: "mi", PricePerHour: 1,
		Resources: capacity.Resources{MilliCPU: 8000, Memory: 32 << 30, Extended: map[string]int64{"amd.com/gpu": 4}}}}}
	rep := Compute([]Pool{p}, nil, many(6, "g", rl("cpu", "1", "amd.com/gpu", "1")))
	if got := newNodes(t, p, rep); !slices.Equal(got, []int{2}) {
		t.Fatalf("new nodes %v, want 2 (6 GPUs, 4 a node)", got)
	}
	rep = Compute([]Pool{p}, nil, many(1, "g", rl("cpu", "1", "intel.com/gpu", "1")))
	if len(rep.Unmatched) != 1 {
		t.Fatalf("an intel.com/gpu pod matched an amd.com/gpu pool: %+v", rep)
	}
}

// TestInitializingNode: a Node whose device plugin has not advertised its
// GPUs yet counts with its offering's (found by its instance-type label):
// the pod waiting for it is placed there, not counted as demand for
// another Node; a Node of an unknown type counts as it shows.
func TestInitializingNode(t *testing.T) {
	p := Pool{Name: "g", Labels: map[string]string{PoolLabel: "g"}, Offerings: []capacity.Offering{{Type: "k1", PricePerHour: 1,
		Resources: capacity.Resources{MilliCPU: 1000, Memory: 2 << 30, GPUs: 1, Extended: map[string]int64{"example.com/fpga": 1}}}}}
	n := znode("n1", "g", "0", rl("cpu", "1", "memory", "2Gi"), func(n *corev1.Node) { n.Labels[corev1.LabelInstanceTypeStable] = "k1" })
	pods := []*corev1.Pod{pod("a", rl("cpu", "100m", "nvidia.com/gpu", "1")), pod("b", rl("cpu", "100m", "example.com/fpga", "1"))}
	rep := Compute([]Pool{p}, []*corev1.Node{n}, pods)
	if len(rep.Pods["g"]) != 0 {
		t.Fatalf("demand %v: the initializing Node's GPU and FPGA were not counted", rep.Pods["g"])
	}
	if got := rep.Pressure["g"].Nodes[0].Resources; got.GPUs != 1 || got.Extended["example.com/fpga"] != 1 || got.MilliCPU != 1000 {
		t.Fatalf("Node resources %v", got)
	}
	n.Labels[corev1.LabelInstanceTypeStable] = "other"
	rep = Compute([]Pool{p}, []*corev1.Node{n}, pods)
	if len(rep.Pods["g"]) != 2 {
		t.Fatalf("demand %v, want both pods (a Node of another type shows no GPU)", rep.Pods["g"])
	}
}

// BenchmarkComputeAntiAffinity1000 is one pass in the middle of
// TestLiveScaleUp's node-dense run: 1,000 pods with hostname anti-affinity,
// 500 of them on 500 Nodes, 500 Nodes joined and empty, 500 pods waiting
// (each is tried against the Nodes' room and its rules).
func BenchmarkComputeAntiAffinity1000(b *testing.B) {
	p := zonal("a")
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	small := rl("cpu", "10m", "memory", "50Mi")
	for i := range 1000 {
		name := fmt.Sprintf("n%d", i)
		nodes = append(nodes, znode(name, "z", fmt.Sprint(i), rl("cpu", "4", "memory", "16Gi")))
		opts := []podOpt{labelled("app", "web"), antiHost("web")}
		if i < 500 {
			opts = append(opts, on(name))
		}
		pods = append(pods, pod(fmt.Sprintf("w%d", i), small, opts...))
	}
	b.ReportAllocs()
	for b.Loop() {
		rep := Compute([]Pool{p}, nodes, pods)
		if len(rep.Pods["z"]) != 0 {
			b.Fatalf("%d pods demand, want none (500 empty Nodes take them)", len(rep.Pods["z"]))
		}
	}
}

// TestNoSlotsWithoutRules: pods without placement rules carry no slot, also
// when their requests rule out some of the pool's offerings (the packing
// sees that by itself), so their demand is what it always was.
func TestNoSlotsWithoutRules(t *testing.T) {
	p := zonal("a", "b")
	p.Offerings = append(p.Offerings, capacity.Offering{Type: "c16", Zone: "a", PricePerHour: 4,
		Resources: capacity.Resources{MilliCPU: 16000, Memory: 64 << 30}})
	rep := Compute([]Pool{p}, nil, []*corev1.Pod{pod("big", rl("cpu", "8")), pod("small", rl("cpu", "1"))})
	if len(rep.Slots["z"]) != 0 {
		t.Fatalf("slots %+v for pods without rules", rep.Slots["z"])
	}
	for _, pd := range rep.Pressure["z"].Pending {
		if len(pd.Requests.Extended) != 0 {
			t.Fatalf("pending %+v carries made-up resources", pd)
		}
	}
}

func minDomains(n int32) podOpt {
	return func(p *corev1.Pod) {
		for i := range p.Spec.TopologySpreadConstraints {
			p.Spec.TopologySpreadConstraints[i].MinDomains = &n
		}
	}
}

// TestZoneSpreadWhileAZoneBoots: a zone spread over two zones whose second
// Node has not registered yet. kube-scheduler sees one domain; with
// minDomains 2 it lets that zone take maxSkew pods only (the global
// minimum is 0 until the second zone has a Node), so the rest wait for the
// new node in zone b, after which zone a takes its share again. The pass
// must count zone b, where it puts pods on a new node, as a domain for the
// room on zone a's Node: else it wants a second node in zone a for the
// fourth pod, which kube-scheduler puts on the first once b registers (one
// Node too many). Without minDomains kube-scheduler piles the pods into
// the one zone it sees, and so does the pass (no new node).
func TestZoneSpreadWhileAZoneBoots(t *testing.T) {
	small := rl("cpu", "100m", "memory", "64Mi")
	p := zonal("a", "b")
	na := znode("na", "z", "0", rl("cpu", "4", "memory", "16Gi"), zoneOf("a"))
	for _, tc := range []struct {
		name    string
		opts    []podOpt
		want    []int // new nodes by offering (zone a, zone b)
		onA     int   // pods on na (running and placed on its room)
		pending []string
	}{
		{"minDomains 2", []podOpt{labelled("app", "web"), spread(corev1.LabelTopologyZone, 1, "web"), minDomains(2)}, []int{0, 1}, 2,
			[]string{"default/w0", "default/w2"}},
		{"no minDomains", []podOpt{labelled("app", "web"), spread(corev1.LabelTopologyZone, 1, "web")}, []int{0, 0}, 4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := append([]*corev1.Pod{pod("r", small, append(slices.Clone(tc.opts), on("na"))...)}, many(3, "w", small, tc.opts...)...)
			rep := Compute([]Pool{p}, []*corev1.Node{na}, pods)
			if len(rep.Unmatched) > 0 || len(rep.Unmodelled) > 0 {
				t.Fatalf("unmatched %+v unmodelled %+v", rep.Unmatched, rep.Unmodelled)
			}
			if got := newNodes(t, p, rep); !slices.Equal(got, tc.want) {
				t.Fatalf("new nodes by zone %v, want %v (pending %+v)", got, tc.want, rep.Pressure["z"].Pending)
			}
			if got := len(rep.Pressure["z"].Nodes[0].Running); got != tc.onA {
				t.Fatalf("na runs %d, want %d", got, tc.onA)
			}
			if got := rep.Pods["z"]; !slices.Equal(got, tc.pending) {
				t.Fatalf("demand %v, want %v", got, tc.pending)
			}
		})
	}
}

// TestZoneSpreadMinDomainsAboveZones: minDomains 3 over a pool of two
// zones can never be met (kube-scheduler's global minimum stays 0, so
// each zone holds maxSkew pods): one node per zone for the pods that fit,
// the others reported.
func TestZoneSpreadMinDomainsAboveZones(t *testing.T) {
	p := zonal("a", "b")
	rep := Compute([]Pool{p}, nil, many(4, "w", rl("cpu", "100m"), labelled("app", "web"), spread(corev1.LabelTopologyZone, 1, "web"), minDomains(3)))
	if got := newNodes(t, p, rep); !slices.Equal(got, []int{1, 1}) {
		t.Fatalf("new nodes by zone %v, want one each", got)
	}
	if len(rep.Unmatched) != 2 || !strings.Contains(rep.Unmatched[0].Reason, "leave no zone") {
		t.Fatalf("unmatched %+v, want 2 pods whose zone rules leave no zone", rep.Unmatched)
	}
}
