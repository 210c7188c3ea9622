package operator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
)

// kubeletZonePool is a netns NodePool in kubelet mode with one 1-CPU
// offering in zone a and one in zone b (same type and price): its machines
// join as real kubelet Nodes labelled with their offering's zone.
const kubeletZonePool = `{"nodes":{"min":0,"max":%d},"provider":{"type":"netns","options":{"prefix":%q,"subnet":"10.233.%d.0/24"}},
  "offerings":[{"type":"k1","zone":"a","cpu":"1","memory":"2Gi","price":1},{"type":"k1","zone":"b","cpu":"1","memory":"2Gi","price":1}],
  "scaling":{"idle_timeout":"1s","batch_window":"200ms"},
  "node_labels":{"tier":"topo"},"node_taints":[{"key":"tide.dev/test","value":"kubelet","effect":"NoSchedule"}],
  "node_join":{"mode":"kubelet","kubelet":%q,"cni_bin_dir":%q,"sandbox_image":%q,"images":[%q,%q],"token_ttl":"10m"}}`

// machineWatch samples a pool every 100 ms until the test ends: its Nodes,
// its machines as tide kube holds them, and the bootstrap token Secrets
// minted for them. It keeps every machine ever seen and the peaks, so
// that a machine launched and deleted between two looks at the end still
// counts.
type machineWatch struct {
	mu       sync.Mutex
	ever     map[string]bool // machine ids: Nodes, tide's machines, tokens
	peakNode int
	peakHeld int // machines tide kube held at once (status.Nodes)
	peakWant int // its desired count
	// registered is when each Node was first seen, and in which zone.
	registered map[string]time.Time
	zoneOf     map[string]string
}

// registrations says when each Node of zones was first seen, in order,
// from at.
func (w *machineWatch) registrations(at time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	names := slices.SortedFunc(func(yield func(string) bool) {
		for n := range w.registered {
			if !yield(n) {
				return
			}
		}
	}, func(a, b string) int { return w.registered[a].Compare(w.registered[b]) })
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("%s (zone %s) +%v", n, w.zoneOf[n], w.registered[n].Sub(at).Round(100*time.Millisecond)))
	}
	return strings.Join(out, ", ")
}

func (l *live) watchMachines(t *testing.T, op *operator.Operator, pool string) *machineWatch {
	t.Helper()
	w := &machineWatch{ever: map[string]bool{}, registered: map[string]time.Time{}, zoneOf: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			nodes, _ := l.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "tide.dev/pool=" + pool})
			secrets, _ := l.cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
			st, _ := op.PoolStatus(pool)
			w.mu.Lock()
			if nodes != nil {
				w.peakNode = max(w.peakNode, len(nodes.Items))
				for _, n := range nodes.Items {
					w.ever[n.Name] = true
					if _, ok := w.registered[n.Name]; !ok {
						w.registered[n.Name], w.zoneOf[n.Name] = time.Now(), n.Labels[corev1.LabelTopologyZone]
					}
				}
			}
			if secrets != nil {
				for _, s := range secrets.Items {
					w.ever[s.Labels[operator.MachineLabel]] = true
				}
			}
			w.peakHeld, w.peakWant = max(w.peakHeld, len(st.Nodes)), max(w.peakWant, st.Desired)
			for _, n := range st.Nodes {
				if n.MachineID != "" {
					w.ever[n.MachineID] = true
				}
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// check fails t when more than want machines were ever launched, or more
// than want Nodes or machines existed (or were wanted) at once.
func (w *machineWatch) check(t *testing.T, stage string, want int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	ever := slices.Sorted(func(yield func(string) bool) {
		for id := range w.ever {
			if !yield(id) {
				return
			}
		}
	})
	if len(ever) > want || w.peakNode > want || w.peakHeld > want || w.peakWant > want {
		t.Errorf("%s: %d machines launched so far %v, at most %d Nodes, %d machines held and %d desired at once; the constraints need %d",
			stage, len(ever), ever, w.peakNode, w.peakHeld, w.peakWant, want)
	}
}

// topoDeployment creates Deployment name of n tiny busybox pods (app=name)
// for the tier=topo pool, with opts applied to the pod spec.
func (l *live) topoDeployment(t *testing.T, name string, n int32, opts ...func(*corev1.PodSpec)) {
	t.Helper()
	grace := int64(1)
	labels := map[string]string{"app": name}
	spec := corev1.PodSpec{NodeSelector: map[string]string{"tier": "topo"}, TerminationGracePeriodSeconds: &grace,
		Tolerations: []corev1.Toleration{{Key: "tide.dev/test", Operator: corev1.TolerationOpEqual, Value: "kubelet", Effect: corev1.TaintEffectNoSchedule}},
		Containers: []corev1.Container{{Name: "c", Image: kubetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", `trap 'exit 0' TERM; while true; do sleep 0.5; done`},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"),
				corev1.ResourceMemory: resource.MustParse("16Mi")}}}}}
	for _, o := range opts {
		o(&spec)
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}}}
	if _, err := l.cs.AppsV1().Deployments("default").Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runningOn waits until the n pods of app run on the pool's Nodes, the
// pool has nodes Nodes, and every one of them is a real kubelet's; it
// returns each pod's Node.
func (l *live) runningOn(t *testing.T, pool, app string, n, nodes int) map[string]*corev1.Node {
	t.Helper()
	ctx := context.Background()
	var on map[string]*corev1.Node
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		ns := l.poolNodes(t, pool)
		byName := map[string]*corev1.Node{}
		for i := range ns {
			byName[ns[i].Name] = &ns[i]
		}
		pods, err := l.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err.Error()
		}
		on = map[string]*corev1.Node{}
		running := 0
		for _, p := range pods.Items {
			if nd := byName[p.Spec.NodeName]; nd != nil && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
				on[p.Name] = nd
			}
		}
		return running == n && len(pods.Items) == n && len(ns) == nodes,
			fmt.Sprintf("%s: %d of %d pods Running on the pool's %d Nodes (want %d)", app, running, n, len(ns), nodes)
	})
	for p, nd := range on {
		if v := nd.Status.NodeInfo.KubeletVersion; !strings.HasPrefix(v, "v1.") || nd.Spec.ProviderID != operator.ProviderID("netns", nd.Name) {
			t.Fatalf("pod %s on Node %s: kubelet %q, providerID %q: not a kubelet machine of the pool", p, nd.Name, v, nd.Spec.ProviderID)
		}
		if z := nd.Labels[corev1.LabelTopologyZone]; z != "a" && z != "b" {
			t.Fatalf("Node %s: zone %q, want its offering's (a or b)", nd.Name, z)
		}
	}
	return on
}

// bindings says when each pod of app was bound (its PodScheduled
// condition, to the second) and in which zone, from at.
func (l *live) bindings(t *testing.T, app string, at time.Time) string {
	t.Helper()
	pods, err := l.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		nd, err := l.cs.CoreV1().Nodes().Get(context.Background(), p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
				out = append(out, fmt.Sprintf("zone %s +%ds", nd.Labels[corev1.LabelTopologyZone], int(c.LastTransitionTime.Sub(at.Truncate(time.Second)).Seconds())))
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// morePasses waits (up to a minute) until op ran n more passes.
func morePasses(t *testing.T, op *operator.Operator, n uint64) {
	t.Helper()
	p0 := op.Passes()
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		return op.Passes() >= p0+n, fmt.Sprintf("%d of %d more passes", op.Passes()-p0, n)
	})
}

// TestLiveKubeletTopology: pod placement rules on real kubelet Nodes. One
// NodePool whose 1-CPU machines come in zone a or zone b (two offerings)
// serves three Deployments of tiny pods in turn, the Nodes shared where
// the count stays unambiguous, while a watcher records every machine,
// Node and token the pool ever had and how many existed at once:
//
//   - 4 pods spread by zone (DoNotSchedule, maxSkew 1, minDomains 2): one
//     Node per zone, two pods Running in each (their CPU fits one Node).
//     minDomains is what makes kube-scheduler wait for the second zone's
//     Node (docs/kubernetes.md: without it pods bound while only one zone
//     has a Node all go there);
//   - 3 pods with required anti-affinity on hostname: two take the Nodes
//     there are, the third gets a Node of its own: 3 Nodes;
//   - 4 pods binding host port 8080: three share the three Nodes, the
//     fourth conflicts on each and gets its own: 4 Nodes.
//
// Never more than 2, 3 and 4 machines (launched ever, Nodes, machines held
// or desired at once) in those stages: the peak, not only the end. Then the
// Deployments go and the pool returns to its minimum of 0: no Node,
// machine, token or network namespace left.
func TestLiveKubeletTopology(t *testing.T) {
	began := time.Now()
	ks := startKubeletSetup(t)
	l := ks.l
	ctx := context.Background()
	const pool = "topo"
	l.nodePool(t, pool, fmt.Sprintf(kubeletZonePool, 8, ks.prefix, ks.third, filepath.Join(l.Bin, "kubelet"), kubetest.CNIBinDir(),
		kubetest.PauseImage, ks.pause, ks.busybox))
	op := ks.runOperator(t, pool)
	w := l.watchMachines(t, op, pool)
	setup := time.Since(began)

	// 1. Zone spread.
	at := time.Now()
	minDomains := int32(2)
	l.topoDeployment(t, "spread", 4, func(s *corev1.PodSpec) {
		s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.DoNotSchedule, MinDomains: &minDomains,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
	})
	on := l.runningOn(t, pool, "spread", 4, 2)
	zones := map[string]int{}
	for _, nd := range on {
		zones[nd.Labels[corev1.LabelTopologyZone]]++
	}
	if zones["a"] != 2 || zones["b"] != 2 {
		t.Fatalf("spread pods by zone: %v, want 2 in a and 2 in b", zones)
	}
	// No more Nodes come: several more passes see the same.
	morePasses(t, op, 4)
	w.check(t, "zone spread", 2)
	tSpread := time.Since(at)
	t.Logf("zone spread: Nodes registered (from the Deployment's creation): %s; pods bound: %s", w.registrations(at), l.bindings(t, "spread", at))

	// 2. Hostname anti-affinity, on the Nodes of 1 and one more.
	at = time.Now()
	l.topoDeployment(t, "anti", 3, func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "anti"}}}}}}
	})
	on = l.runningOn(t, pool, "anti", 3, 3)
	hosts := map[string]bool{}
	for _, nd := range on {
		hosts[nd.Name] = true
	}
	if len(hosts) != 3 {
		t.Fatalf("anti-affine pods on %d Nodes, want 3", len(hosts))
	}
	morePasses(t, op, 4)
	w.check(t, "hostname anti-affinity", 3)
	tAnti := time.Since(at)

	// 3. Host port 8080: one pod a Node.
	at = time.Now()
	l.topoDeployment(t, "port", 4, func(s *corev1.PodSpec) {
		s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
	})
	on = l.runningOn(t, pool, "port", 4, 4)
	hosts = map[string]bool{}
	for _, nd := range on {
		hosts[nd.Name] = true
	}
	if len(hosts) != 4 {
		t.Fatalf("host-port pods on %d Nodes, want 4", len(hosts))
	}
	morePasses(t, op, 4)
	w.check(t, "host port", 4)
	tPort := time.Since(at)

	// Back to the minimum: nothing of the machines left.
	at = time.Now()
	for _, d := range []string{"spread", "anti", "port"} {
		if err := l.cs.AppsV1().Deployments("default").Delete(ctx, d, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		nn := len(l.poolNodes(t, pool))
		secrets, err := l.cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
		if err != nil {
			return false, err.Error()
		}
		st, _ := op.PoolStatus(pool)
		left := 0
		ents, _ := os.ReadDir("/run/netns")
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ks.prefix+"-") {
				left++
			}
		}
		return nn == 0 && len(secrets.Items) == 0 && len(st.Nodes) == 0 && len(st.Deleting) == 0 && left == 0,
			fmt.Sprintf("%d Nodes, %d bootstrap tokens, %d machines held, %d being deleted, %d network namespaces", nn, len(secrets.Items),
				len(st.Nodes), len(st.Deleting), left)
	})
	w.check(t, "the end", 4)
	t.Logf("real kubelet Nodes: zone spread 2 Nodes (2+2 pods) in %v; anti-affinity 3 Nodes in %v; host port 4 Nodes in %v; back to 0 in %v (setup %v)",
		tSpread.Round(time.Millisecond), tAnti.Round(time.Millisecond), tPort.Round(time.Millisecond), time.Since(at).Round(time.Millisecond),
		setup.Round(time.Millisecond))
}
