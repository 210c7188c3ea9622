package demand

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tide-project/tide/internal/capacity"
)

const gpuClass = "gpu.example.com"

// draPool is a pool of 4-CPU nodes in zone a, each with two devices of
// DeviceClass gpu.example.com.
func draPool() Pool {
	p := zonal("a")
	p.Offerings[0].Resources.Extended = map[string]int64{DeviceClassPrefix + gpuClass: 2}
	return p
}

func claimSpec(reqs ...resourcev1beta1.DeviceRequest) resourcev1beta1.ResourceClaimSpec {
	return resourcev1beta1.ResourceClaimSpec{Devices: resourcev1beta1.DeviceClaim{Requests: reqs}}
}

func exactly(name, class string, n int64) resourcev1beta1.DeviceRequest {
	return resourcev1beta1.DeviceRequest{Name: name, DeviceClassName: class, AllocationMode: resourcev1beta1.DeviceAllocationModeExactCount, Count: n}
}

// fromTemplate gives a pod the claim "gpu" made from template tmpl.
func fromTemplate(tmpl string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: &tmpl})
	}
}

func namedClaim(claim string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: &claim})
	}
}

func draClaims(tmpls map[string]resourcev1beta1.ResourceClaimSpec, claims ...*resourcev1beta1.ResourceClaim) Claims {
	c := Claims{Served: true, Claims: map[string]*resourcev1beta1.ResourceClaim{}, Templates: map[string]*resourcev1beta1.ResourceClaimTemplate{}}
	for name, spec := range tmpls {
		c.Templates["default/"+name] = &resourcev1beta1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: resourcev1beta1.ResourceClaimTemplateSpec{Spec: spec}}
	}
	for _, cl := range claims {
		c.Claims[cl.Namespace+"/"+cl.Name] = cl
	}
	return c
}

// TestDRADeviceCounts: pods whose claims ask for an exact count of devices
// of a DeviceClass the pool's offering declares get nodes by that count:
// three pods of one device each on nodes of two → 2 nodes; two devices each
// → 3 nodes; a pool without the class's devices is not theirs.
func TestDRADeviceCounts(t *testing.T) {
	small := rl("cpu", "100m")
	c := draClaims(map[string]resourcev1beta1.ResourceClaimSpec{"one": claimSpec(exactly("g", gpuClass, 1)), "two": claimSpec(exactly("g", gpuClass, 2))})
	for _, tc := range []struct {
		tmpl string
		want int
	}{{"one", 2}, {"two", 3}} {
		p := draPool()
		plain := zonal("a")
		plain.Name, plain.Labels = "plain", map[string]string{PoolLabel: "plain"}
		pods := WithDevices(many(3, "w", small, fromTemplate(tc.tmpl)), c, []Pool{p, plain})
		rep := Compute([]Pool{p, plain}, nil, pods)
		if len(rep.Unmodelled) > 0 || len(rep.Unmatched) > 0 {
			t.Fatalf("%s: unmodelled %+v unmatched %+v", tc.tmpl, rep.Unmodelled, rep.Unmatched)
		}
		if got := sum(newNodes(t, p, rep)); got != tc.want {
			t.Fatalf("%s: %d new nodes, want %d (pending %+v)", tc.tmpl, got, tc.want, rep.Pressure["z"].Pending)
		}
		if len(rep.Pods["plain"]) != 0 {
			t.Fatalf("%s: pool without devices got %v", tc.tmpl, rep.Pods["plain"])
		}
	}
	// The pods given are not modified.
	orig := many(1, "w", small, fromTemplate("one"))
	WithDevices(orig, c, []Pool{draPool()})
	if len(orig[0].Spec.ResourceClaims) != 1 || len(orig[0].Spec.Containers[0].Resources.Requests) != 1 {
		t.Fatalf("WithDevices changed its input: %+v", orig[0].Spec)
	}
}

// TestDRARoom: a Node of the pool (it advertises no device: its offering's
// count stands in) with one of its two devices allocated to a bound pod's
// claim has room for one more pod of one device; the next needs a new node.
func TestDRARoom(t *testing.T) {
	small := rl("cpu", "100m")
	p := draPool()
	na := znode("na", "z", "0", rl("cpu", "4", "memory", "16Gi"), zoneOf("a"), func(n *corev1.Node) { n.Labels[corev1.LabelInstanceTypeStable] = "c4" })
	claimName := "r-gpu"
	bound := &resourcev1beta1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claimName}, Spec: claimSpec(exactly("g", gpuClass, 1)),
		Status: resourcev1beta1.ResourceClaimStatus{Allocation: &resourcev1beta1.AllocationResult{Devices: resourcev1beta1.DeviceAllocationResult{
			Results: []resourcev1beta1.DeviceRequestAllocationResult{{Request: "g", Driver: "d", Pool: "na", Device: "gpu-0"}}}}}}
	c := draClaims(map[string]resourcev1beta1.ResourceClaimSpec{"one": claimSpec(exactly("g", gpuClass, 1))}, bound)
	r := pod("r", small, fromTemplate("one"), on("na"), func(p *corev1.Pod) {
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &claimName}}
	})
	pods := WithDevices(append([]*corev1.Pod{r}, many(2, "w", small, fromTemplate("one"))...), c, []Pool{p})
	rep := Compute([]Pool{p}, []*corev1.Node{na}, pods)
	if len(rep.Unmodelled) > 0 {
		t.Fatalf("unmodelled %+v", rep.Unmodelled)
	}
	if got := rep.Pods["z"]; !slices.Equal(got, []string{"default/w1"}) {
		t.Fatalf("demand %v, want w1 only (w0 takes na's second device)", got)
	}
	if got := sum(newNodes(t, p, rep)); got != 1 {
		t.Fatalf("%d new nodes, want 1", got)
	}
}

// TestDRABeingBound: a pod not bound yet whose claim kube-scheduler has
// allocated and reserved for it (its binding cycle: allocate, reserve,
// bind) is counted by what was allocated, as a bound pod, and not
// reported: it waits for no Node. The same claim reserved for another pod
// is "allocated already".
func TestDRABeingBound(t *testing.T) {
	p := draPool()
	claimName := "b-gpu"
	claim := func(reserved types.UID) *resourcev1beta1.ResourceClaim {
		return &resourcev1beta1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claimName}, Spec: claimSpec(exactly("g", gpuClass, 1)),
			Status: resourcev1beta1.ResourceClaimStatus{Allocation: &resourcev1beta1.AllocationResult{Devices: resourcev1beta1.DeviceAllocationResult{
				Results: []resourcev1beta1.DeviceRequestAllocationResult{{Request: "g", Driver: "d", Pool: "n", Device: "gpu-0"}}}},
				ReservedFor: []resourcev1beta1.ResourceClaimConsumerReference{{Resource: "pods", Name: "b", UID: reserved}}}}
	}
	b := pod("b", rl("cpu", "100m"), fromTemplate("one"), func(p *corev1.Pod) {
		p.UID = "uid-b"
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &claimName}}
	})
	tmpls := map[string]resourcev1beta1.ResourceClaimSpec{"one": claimSpec(exactly("g", gpuClass, 1))}
	pods := WithDevices([]*corev1.Pod{b}, draClaims(tmpls, claim("uid-b")), []Pool{p})
	if why := draReason(pods[0]); why != "" {
		t.Fatalf("a pod being bound reported: %s", why)
	}
	if got := pods[0].Spec.Containers[0].Resources.Requests[corev1.ResourceName(DeviceClassPrefix+gpuClass)]; got.Value() != 1 {
		t.Fatalf("a pod being bound counts %s devices, want its 1 allocated", got.String())
	}
	pods = WithDevices([]*corev1.Pod{b}, draClaims(tmpls, claim("uid-other")), []Pool{p})
	if why := draReason(pods[0]); !strings.Contains(why, "allocated already") {
		t.Fatalf("a claim reserved for another pod: %q, want allocated already", why)
	}
}

// TestDRANotCounted: what tide cannot count is counted by the pod's other
// requests and reported, with why.
func TestDRANotCounted(t *testing.T) {
	small := rl("cpu", "100m")
	sel := exactly("g", gpuClass, 1)
	sel.Selectors = []resourcev1beta1.DeviceSelector{{CEL: &resourcev1beta1.CELDeviceSelector{Expression: "true"}}}
	all := resourcev1beta1.DeviceRequest{Name: "g", DeviceClassName: gpuClass, AllocationMode: resourcev1beta1.DeviceAllocationModeAll}
	allocatedClaim := &resourcev1beta1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "taken"}, Spec: claimSpec(exactly("g", gpuClass, 1)),
		Status: resourcev1beta1.ResourceClaimStatus{Allocation: &resourcev1beta1.AllocationResult{}}}
	shared := &resourcev1beta1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shared"}, Spec: claimSpec(exactly("g", gpuClass, 1))}
	c := draClaims(map[string]resourcev1beta1.ResourceClaimSpec{"sel": claimSpec(sel), "all": claimSpec(all),
		"other": claimSpec(exactly("g", "fpga.example.com", 1))}, allocatedClaim, shared)
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		c    Claims
		why  string
	}{
		{"selector", many(1, "w", small, fromTemplate("sel")), c, "CEL selectors"},
		{"all devices", many(1, "w", small, fromTemplate("all")), c, "allocation mode All"},
		{"undeclared class", many(1, "w", small, fromTemplate("other")), c, `no NodePool offering declares DeviceClass "fpga.example.com"`},
		{"no template", many(1, "w", small, fromTemplate("missing")), c, "does not exist"},
		{"allocated already", many(1, "w", small, namedClaim("taken")), c, "allocated already"},
		{"shared", many(2, "w", small, namedClaim("shared")), c, "shared by several pods"},
		{"API not served", many(1, "w", small, fromTemplate("one")), Claims{Why: "the cluster serves no resource.k8s.io/v1beta1"}, "serves no resource.k8s.io"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := draPool()
			rep := Compute([]Pool{p}, nil, WithDevices(tc.pods, tc.c, []Pool{p}))
			if len(rep.Unmodelled) != len(tc.pods) || !strings.Contains(rep.Unmodelled[0].Reason, tc.why) ||
				!strings.Contains(rep.Unmodelled[0].Reason, "dynamic resource claims (DRA)") {
				t.Fatalf("unmodelled %+v, want each pod with %q", rep.Unmodelled, tc.why)
			}
			if got := sum(newNodes(t, p, rep)); got != 1 {
				t.Fatalf("%d new nodes, want 1 (by CPU)", got)
			}
		})
	}
}

// TestDeviceCountsNotAdvertised: a Node tide makes does not advertise an
// offering's DRA device count (a driver's ResourceSlices do).
func TestDeviceCountsNotAdvertised(t *testing.T) {
	l := ResourceList(capacity.Resources{MilliCPU: 1000, Extended: map[string]int64{DeviceClassPrefix + gpuClass: 2, "amd.com/gpu": 1}})
	amd := l["amd.com/gpu"]
	if _, ok := l[DeviceClassPrefix+gpuClass]; ok || amd.Value() != 1 {
		t.Fatalf("resource list %v", l)
	}
}

// TestDRAV1Shape: claims read in resource.k8s.io/v1 (or v1beta2: one
// shape, requests under `exactly` or `firstAvailable`) count as their
// v1beta1 form does.
func TestDRAV1Shape(t *testing.T) {
	const tmplJSON = `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"namespace":"default","name":"two"},
  "spec":{"spec":{"devices":{"requests":[{"name":"g","exactly":{"deviceClassName":"gpu.example.com","allocationMode":"ExactCount","count":2,"capacity":{}}}]}}}}`
	const altJSON = `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"namespace":"default","name":"alt"},
  "spec":{"spec":{"devices":{"requests":[{"name":"g","firstAvailable":[{"name":"big","deviceClassName":"gpu.example.com","count":2}]}]}}}}`
	const claimJSON = `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"namespace":"default","name":"r-gpu"},
  "spec":{"devices":{"requests":[{"name":"g","exactly":{"deviceClassName":"gpu.example.com","selectors":[{"cel":{"expression":"true"}}]}}]}},
  "status":{"allocation":{"devices":{"results":[{"request":"g","driver":"d","pool":"na","device":"gpu-0"}]}}}}`
	c := Claims{Served: true, Claims: map[string]*resourcev1beta1.ResourceClaim{}, Templates: map[string]*resourcev1beta1.ResourceClaimTemplate{}}
	for _, js := range []string{tmplJSON, altJSON} {
		var tm resourcev1beta2.ResourceClaimTemplate
		if err := json.Unmarshal([]byte(js), &tm); err != nil {
			t.Fatal(err)
		}
		c.Templates["default/"+tm.Name] = TemplateV1beta2(&tm)
	}
	var cl resourcev1beta2.ResourceClaim
	if err := json.Unmarshal([]byte(claimJSON), &cl); err != nil {
		t.Fatal(err)
	}
	c.Claims["default/r-gpu"] = ClaimV1beta2(&cl)
	p := draPool()
	p.Offerings[0].Resources.Extended[DeviceClassPrefix+gpuClass] = 4
	na := znode("na", "z", "0", rl("cpu", "4", "memory", "16Gi"), zoneOf("a"), func(n *corev1.Node) { n.Labels[corev1.LabelInstanceTypeStable] = "c4" })
	claimName := "r-gpu"
	// On na (4 devices): a bound pod holding one device (allocated by a CEL
	// selector: counted from the allocation), then three pods of two: one
	// fits na's 3 free devices, the other two need a node; the pod with
	// alternatives is not counted (its CPU takes na's room).
	r := pod("r", rl("cpu", "100m"), namedClaim("r-gpu"), on("na"), func(p *corev1.Pod) {
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &claimName}}
	})
	pods := append([]*corev1.Pod{r}, many(3, "w", rl("cpu", "100m"), fromTemplate("two"))...)
	pods = append(pods, pod("alt", rl("cpu", "100m"), fromTemplate("alt")))
	rep := Compute([]Pool{p}, []*corev1.Node{na}, WithDevices(pods, c, []Pool{p}))
	if got := rep.Pods["z"]; !slices.Equal(got, []string{"default/w1", "default/w2"}) {
		t.Fatalf("demand %v, want w1 and w2 (w0 on na, alt on na's CPU)", got)
	}
	if len(rep.Unmodelled) != 1 || rep.Unmodelled[0].Name != "alt" || !strings.Contains(rep.Unmodelled[0].Reason, "alternatives (firstAvailable)") {
		t.Fatalf("unmodelled %+v", rep.Unmodelled)
	}
	if got := sum(newNodes(t, p, rep)); got != 1 {
		t.Fatalf("%d new nodes, want 1 (w1 and w2: 4 devices)", got)
	}
}
