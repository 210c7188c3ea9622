package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/tide-project/tide/deploy"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
)

// live is a test cluster with the NodePool and ProvisioningRequest CRDs
// installed.
type live struct {
	*kubetest.Cluster
	cs *kubernetes.Clientset
	// options, when set, adjusts the options runOperator runs tide kube with.
	options func(*operator.Options)
}

// livePlane is the control plane the package's live tests share
// (kubetest.Main in TestMain): DynamicResourceAllocation on with
// resource.k8s.io v1beta1 and v1beta2 served (TestLiveDRADeviceCounts),
// the bridge gateway of the kubelet and netns tests (subnetThird) in the
// apiserver's certificate, and tide's CRDs (NodePool, ProvisioningRequest)
// and RBAC (deploy/rbac.yaml) installed: what every test of the package
// needs, part of the pristine state each starts from.
func livePlane() kubetest.SharedPlane {
	return kubetest.SharedPlane{
		Options: kubetest.Options{APIServerSANs: []string{fmt.Sprintf("10.233.%d.1", subnetThird())},
			FeatureGates: "DynamicResourceAllocation=true", RuntimeConfig: "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"},
		Setup: func(c *kubetest.Cluster) error {
			for _, m := range [][]byte{deploy.CRD, deploy.ProvisioningRequestCRD, deploy.RBAC} {
				if err := c.Create(m); err != nil {
					return err
				}
			}
			for _, path := range []string{"/apis/tide.dev/v1alpha1/nodepools", "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"} {
				if err := served(c, path); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// subnetThird is the third octet of the subnet (10.233.<third>.0/24) of
// the netns pools of this test process (a concurrent test binary on this
// host takes another): its .1 is the bridge gateway the machines reach the
// apiserver at.
func subnetThird() int { return 20 + os.Getpid()%200 }

// served waits (up to a minute) until the apiserver serves path.
func served(c *kubetest.Cluster, path string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		code, body, err := c.Do(http.MethodGet, path, nil)
		if err == nil && code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not served: %d %s %v", path, code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startLive returns the package's shared control plane (livePlane), reset
// to its pristine state, and resets it again when t ends, after every
// cleanup t registers later (its operators, replicas and machines stop
// first).
func startLive(t *testing.T) *live {
	t.Helper()
	return newLive(t, kubetest.Shared(t))
}

// startOwnLive starts a control plane of t's own with options o and the
// manifests installed, for a test the shared plane cannot serve (say why
// where it is called).
func startOwnLive(t *testing.T, o kubetest.Options, manifests ...[]byte) *live {
	t.Helper()
	c := kubetest.StartWith(t, o)
	for _, m := range manifests {
		if err := c.Create(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := served(c, "/apis/tide.dev/v1alpha1/nodepools"); err != nil {
		t.Fatal(err)
	}
	return newLive(t, c)
}

func newLive(t *testing.T, c *kubetest.Cluster) *live {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &live{Cluster: c, cs: cs}
}

// nodePool creates a NodePool from its spec (YAML or JSON).
func (l *live) nodePool(t *testing.T, name, spec string) {
	t.Helper()
	doc := fmt.Sprintf("apiVersion: tide.dev/v1alpha1\nkind: NodePool\nmetadata:\n  name: %s\nspec: %s\n", name, spec)
	if err := l.Create([]byte(doc)); err != nil {
		t.Fatal(err)
	}
}

// cpuPods creates n pods named <prefix>-<i> in default, each asking 3 CPUs,
// with the node selector tier=<tier> and the tolerations given.
func (l *live) cpuPods(t *testing.T, prefix, tier string, n int, tolerations ...corev1.Toleration) {
	t.Helper()
	zero := int64(0)
	for i := range n {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: "default"},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"tier": tier}, TerminationGracePeriodSeconds: &zero,
				Tolerations: tolerations,
				Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}}
		if _, err := l.cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// boundNodes waits (up to within) until pool has n Nodes and the n pods
// <prefix>-<i> are bound to them, and returns the Nodes.
func (l *live) boundNodes(t *testing.T, pool, prefix string, n int, within time.Duration) []corev1.Node {
	t.Helper()
	var nodes []corev1.Node
	kubetest.Eventually(t, within, func() (bool, string) {
		nodes = l.poolNodes(t, pool)
		bound := 0
		for i := range n {
			p, err := l.cs.CoreV1().Pods("default").Get(context.Background(), fmt.Sprintf("%s-%d", prefix, i), metav1.GetOptions{})
			if err == nil && p.Spec.NodeName != "" && slices.ContainsFunc(nodes, func(n corev1.Node) bool { return n.Name == p.Spec.NodeName }) {
				bound++
			}
		}
		return len(nodes) == n && bound == n, fmt.Sprintf("%d Nodes, %d of %d pods bound to them", len(nodes), bound, n)
	})
	return nodes
}

// poolNodes lists the Nodes of a pool.
func (l *live) poolNodes(t testing.TB, pool string) []corev1.Node {
	t.Helper()
	list, err := l.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: demand.PoolLabel + "=" + pool})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func markedCount(nodes []corev1.Node) int {
	n := 0
	for i := range nodes {
		if !demand.Mark(&nodes[i]).IsZero() {
			n++
		}
	}
	return n
}

// status reads a NodePool's status.
func (l *live) status(t testing.TB, pool string) map[string]any {
	t.Helper()
	_, body, err := l.Do(http.MethodGet, "/apis/tide.dev/v1alpha1/nodepools/"+pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatal(err)
	}
	return obj.Status
}

// events lists the events of a kind of object with a reason.
func (l *live) events(t testing.TB, namespace, kind, reason string) []corev1.Event {
	t.Helper()
	list, err := l.cs.CoreV1().Events(namespace).List(context.Background(),
		metav1.ListOptions{FieldSelector: "involvedObject.kind=" + kind + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// scale sets a Deployment's replicas, retrying when the deployment
// controller changed it in between.
func (l *live) scale(t *testing.T, name string, n int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := l.cs.AppsV1().Deployments("default").GetScale(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = n
		_, err = l.cs.AppsV1().Deployments("default").UpdateScale(context.Background(), name, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// runOperator runs `tide kube` in this process until the test ends and
// returns the operator once it acts, with its metrics and probe addresses.
func (l *live) runOperator(t *testing.T, id string, pools ...string) (*operator.Operator, string, string) {
	t.Helper()
	metrics, probes := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan *operator.Operator, 1)
	done := make(chan error, 1)
	opts := operator.Options{Kubeconfig: l.Kubeconfig, Namespace: "default", Identity: id,
		LeaderElection: true, LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 500 * time.Millisecond,
		MetricsAddr: metrics, ProbeAddr: probes, Interval: time.Second, Batch: 100 * time.Millisecond,
		Pools: pools, Started: func(op *operator.Operator) { started <- op }}
	if l.options != nil {
		l.options(&opts)
	}
	go func() { done <- operator.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("tide kube did not stop")
		}
	})
	select {
	case op := <-started:
		return op, metrics, probes
	case err := <-done:
		t.Fatalf("tide kube: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("tide kube did not take the Lease")
	}
	return nil, "", ""
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const gpuPool = `{"nodes":{"min":0,"max":20},"provider":{"type":"kwok"},
  "offerings":[{"type":"g8","cpu":"32","memory":"256Gi","gpus":8,"price":24.5}],
  "node_labels":{"accelerator":"nvidia"},"node_taints":[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}],
  "scaling":{"policy":"utilization","min_utilization":50,"scale_down_delay":"%s"}}`

// gpuPodSpec is a pod asking for gpus GPUs of the gpu pool.
func gpuPodSpec(gpus int64, selector map[string]string) corev1.PodSpec {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	no := false
	return corev1.PodSpec{AutomountServiceAccountToken: &no, NodeSelector: selector,
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{demand.GPUResource: q, corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{demand.GPUResource: q}}}}}
}

func (l *live) runningPods(t testing.TB, namespace, selector string) (running, total int) {
	t.Helper()
	list, err := l.cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		total++
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	return running, total
}

// notRunning describes up to three pods of the selector that are not
// Running (phase, Node, why the scheduler left them, the Node's taints and
// readiness), for a wait's failure message.
func (l *live) notRunning(t testing.TB, namespace, selector string) string {
	t.Helper()
	list, err := l.cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodRunning || len(out) == 3 {
			continue
		}
		d := fmt.Sprintf("%s %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				d += fmt.Sprintf(" (unscheduled: %s %s)", c.Reason, c.Message)
			}
		}
		if p.Spec.NodeName != "" {
			if n, err := l.cs.CoreV1().Nodes().Get(context.Background(), p.Spec.NodeName, metav1.GetOptions{}); err == nil {
				ready := "unknown"
				for _, c := range n.Status.Conditions {
					if c.Type == corev1.NodeReady {
						ready = string(c.Status)
					}
				}
				d += fmt.Sprintf(" (Node Ready %s, taints %v)", ready, n.Spec.Taints)
			}
		}
		out = append(out, d)
	}
	return strings.Join(out, "; ")
}

// TestLiveGPUDeployment: `tide kube` (in this process: controller-runtime
// manager, Lease, probes, /metrics) scales a min-0 GPU NodePool for a
// Deployment scaled 0 → 50 one-GPU pods on the real apiserver, scheduler and
// kwok: ceil(50/8) = 7 Nodes appear, every pod runs, pods are told why they
// wait; scaled to 0, the Nodes are tainted as deletion candidates, drained and
// deleted after the delay, and the pool is back to its min of 0.
func TestLiveGPUDeployment(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()
	l.nodePool(t, "gpu", fmt.Sprintf(gpuPool, "3s"))
	op, metrics, probes := l.runOperator(t, "replica-a")
	_ = op
	replicas := int32(0)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "burst", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "burst"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "burst"}},
				Spec: gpuPodSpec(1, map[string]string{"accelerator": "nvidia"})}}}
	if _, err := l.cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scale := func(n int32) {
		t.Helper()
		l.scale(t, "burst", n)
	}
	t0 := time.Now()
	scale(50)
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		r, n := l.runningPods(t, "default", "app=burst")
		return r == 50, fmt.Sprintf("%d of %d pods running, %d nodes", r, n, len(l.poolNodes(t, "gpu")))
	})
	t.Logf("0 → 50 GPU pods Running in %v", time.Since(t0).Round(time.Millisecond))
	if got := len(l.poolNodes(t, "gpu")); got != 7 {
		t.Fatalf("%d Nodes for 50 one-GPU pods on 8-GPU nodes, want 7", got)
	}
	if ev := l.events(t, "default", "Pod", "TriggeredScaleUp"); len(ev) == 0 || !strings.Contains(ev[0].Message, "tide is launching") {
		t.Fatalf("no pod event saying tide launches nodes: %+v", ev)
	} else {
		t.Logf("pod event: %s", ev[0].Message)
	}
	kubetest.Eventually(t, 30*time.Second, func() (bool, string) {
		st := l.status(t, "gpu")
		return fmt.Sprint(st["current"]) == "7" && fmt.Sprint(st["target"]) == "7" && strings.Contains(fmt.Sprint(st["conditions"]), "Acting"),
			fmt.Sprintf("status %v", st)
	})
	if code, body := get(t, "http://"+probes+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if code, body := get(t, "http://"+probes+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	code, body := get(t, "http://"+metrics+"/metrics")
	for _, want := range []string{`tide_pool_desired_nodes{pool="gpu"} 7`, "tide_kube_loop_seconds_count", "tide_kube_unschedulable_to_create_seconds_count",
		"leader_election_master_status"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("/metrics (%d) lacks %q", code, want)
		}
	}

	scale(0)
	maxMarked := 0
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		nodes := l.poolNodes(t, "gpu")
		maxMarked = max(maxMarked, markedCount(nodes))
		return len(nodes) == 0, fmt.Sprintf("%d Nodes left, %d marked", len(nodes), markedCount(nodes))
	})
	if maxMarked == 0 {
		t.Fatal("the Nodes were deleted without a deletion-candidate taint seen")
	}
	if ev := l.events(t, "", "Node", "DeletionCandidate"); len(ev) == 0 {
		t.Fatal("no DeletionCandidate event on a Node")
	}
	kubetest.Eventually(t, 30*time.Second, func() (bool, string) {
		st := l.status(t, "gpu")
		return fmt.Sprint(st["current"]) == "0" && fmt.Sprint(st["target"]) == "0", fmt.Sprintf("status %v", st)
	})
}
