package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/deploy"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
)

// inClusterImage is the name tide's image gets in the kubelet Node's
// containerd (tools/ociimage --ref): no registry is involved.
const inClusterImage = "localhost/tide/tide:test"

// hostPool is the netns NodePool of the real kubelet Node tide kube's own
// pods run on: one machine, always there (min 1), no taint, with the
// sandbox, busybox and tide images imported into its containerd.
const hostPool = `{"nodes":{"min":1,"max":1},"provider":{"type":"netns","options":{"prefix":%q,"subnet":"10.233.%d.0/24"}},
  "offerings":[{"type":"k1","cpu":"1","memory":"2Gi","price":1}],
  "node_labels":{"tier":"host"},
  "node_join":{"mode":"kubelet","kubelet":%q,"cni_bin_dir":%q,"sandbox_image":%q,"images":[%q,%q,%q],"token_ttl":"10m"}}`

// inClusterPool is the kwok NodePool the in-cluster controller scales.
const inClusterPool = `{"nodes":{"min":0,"max":4},"provider":{"type":"kwok"},
  "offerings":[{"type":"w4","cpu":"4","memory":"8Gi","price":1}],
  "scaling":{"idle_timeout":"1s","batch_window":"200ms"},
  "node_labels":{"tier":"incluster"}}`

// TestLiveKubeInCluster: tide kube runs in the cluster, as shipped. tide's
// image is built here without a container daemon (the static binary and
// tools/ociimage, scripts/release's code path); a real kubelet Node (a
// netns machine of the NodePool "host", which a tide kube in this process
// keeps at one) imports it into its containerd; the test applies the
// shipped RBAC, ServiceAccount, Deployment (two replicas, leader election,
// liveness and readiness probes), Service and PodDisruptionBudget, with
// only the image (imagePullPolicy Never), the apiserver's address (the
// in-cluster config's KUBERNETES_SERVICE_HOST/PORT: this cluster has no
// kube-proxy), --pools and a node affinity keeping it off the pool it
// scales changed. Both replicas become Ready on the
// kubelet Node and one holds the Lease tide-system/tide-kube; then pending
// pods make the in-cluster controller, with no credential but its
// ServiceAccount's token, scale a kwok NodePool up until every pod is bound.
// Any "forbidden" in the replicas' logs (a permission rbac.yaml lacks)
// fails the test, and so does a restart of a replica. The standby takes
// over when the leader's pod is deleted, scales up once more, and removes
// every Node of the pool once its pods are gone. Nothing is left behind,
// as in TestLiveKubeletNodes.
func TestLiveKubeInCluster(t *testing.T) {
	began := time.Now()
	ks := startKubeletSetup(t)
	l := ks.l
	ctx := context.Background()
	img := tideImage(t)
	l.nodePool(t, "host", fmt.Sprintf(hostPool, ks.prefix, ks.third, filepath.Join(l.Bin, "kubelet"), kubetest.CNIBinDir(),
		kubetest.PauseImage, ks.pause, ks.busybox, img))
	ks.runOperator(t, "host")

	// The shipped manifests, the Deployment patched for this cluster.
	docs := bytes.Split(deploy.Deployment, []byte("\n---\n"))
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(docs[0], &dep); err != nil || dep.Kind != "Deployment" {
		t.Fatalf("deploy/kube/deployment.yaml: the first document is no Deployment: %v", err)
	}
	if *dep.Spec.Replicas != 2 {
		t.Errorf("the shipped Deployment runs %d replicas, want 2", *dep.Spec.Replicas)
	}
	c := &dep.Spec.Template.Spec.Containers[0]
	if c.LivenessProbe == nil || c.ReadinessProbe == nil || !slices.Contains(c.Args, "--leader-elect=true") {
		t.Errorf("the shipped container lacks probes or --leader-elect=true: %v", c.Args)
	}
	c.Image, c.ImagePullPolicy = inClusterImage, corev1.PullNever
	c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: ks.gw},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: ks.api.Port()})
	c.Args = append(c.Args, "--pools=incluster")
	// Off the Nodes of the pool it scales (docs/kubernetes.md): a replica
	// there (the one replacing a deleted pod lands on an emptier kwok Node)
	// would keep its Node from scaling down, and run nowhere on kwok.
	dep.Spec.Template.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: demand.PoolLabel, Operator: corev1.NodeSelectorOpNotIn,
				Values: []string{"incluster"}}}}}}}
	t.Cleanup(func() { deleteInCluster(t, l) }) // before the host's operator and machine stop
	for _, d := range docs[1:] {
		if err := l.Create(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.cs.AppsV1().Deployments(dep.Namespace).Create(ctx, &dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()

	// Both replicas Ready on the kubelet Node, one of them the Lease's holder.
	var leader string
	kubetest.Eventually(t, 4*time.Minute, func() (bool, string) {
		pods := tidePods(t, l)
		hosts := l.poolNodes(t, "host")
		ready := 0
		var states []string
		for _, p := range pods {
			onHost := len(hosts) == 1 && p.Spec.NodeName == hosts[0].Name
			if onHost && podReady(&p) {
				ready++
			}
			states = append(states, fmt.Sprintf("%s on %q %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, podReady(&p)))
		}
		lease, err := l.cs.CoordinationV1().Leases("tide-system").Get(ctx, operator.LeaseName, metav1.GetOptions{})
		holder := ""
		if err == nil && lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		leader = ""
		for _, p := range pods {
			if strings.HasPrefix(holder, p.Name+"_") {
				leader = p.Name
			}
		}
		return ready == 2 && leader != "", fmt.Sprintf("%d of 2 replicas Ready on the kubelet Node (%v), Lease holder %q (%v)",
			ready, states, holder, err)
	})
	t.Logf("2 replicas Ready on the kubelet Node, %s holding the Lease, %v after the Deployment was applied (%v from the start)",
		leader, time.Since(applied).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

	// The in-cluster controller scales its kwok NodePool up.
	l.nodePool(t, "incluster", inClusterPool)
	scaled := time.Now()
	l.cpuPods(t, "ic", "incluster", 2)
	nodes := l.boundNodes(t, "incluster", "ic", 2, 3*time.Minute)
	t.Logf("the in-cluster controller created %d kwok Nodes and the 2 pods were bound in %v", len(nodes),
		time.Since(scaled).Round(time.Millisecond))
	if _, err := l.cs.CoreV1().ConfigMaps("tide-system").Get(ctx, "tide-journal-incluster", metav1.GetOptions{}); err != nil {
		t.Errorf("no journal of the pool in tide-system (the in-cluster controller's namespace): %v", err)
	}
	checkTideLogs(t, l, leader)

	// The standby takes over when the leader's pod goes.
	if err := l.cs.CoreV1().Pods("tide-system").Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var next string // another replica: the standby, or the pod that replaced the leader's
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		lease, err := l.cs.CoordinationV1().Leases("tide-system").Get(ctx, operator.LeaseName, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return false, fmt.Sprint(err)
		}
		next = *lease.Spec.HolderIdentity
		return next != "" && !strings.HasPrefix(next, leader+"_"), "Lease still held by " + next
	})
	t.Logf("the standby %s holds the Lease %v after the leader's pod was deleted", next, time.Since(deleted).Round(time.Millisecond))
	l.cpuPods(t, "ic2", "incluster", 1)
	// 3 CPUs: no room on the first two Nodes, a third one.
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		p, err := l.cs.CoreV1().Pods("default").Get(ctx, "ic2-0", metav1.GetOptions{})
		nodes := l.poolNodes(t, "incluster")
		bound := err == nil && slices.ContainsFunc(nodes, func(n corev1.Node) bool { return n.Name == p.Spec.NodeName })
		return bound && len(nodes) == 3, fmt.Sprintf("%d Nodes, ic2-0 bound to one: %v (%v)", len(nodes), bound, err)
	})
	t.Logf("after the handover the new leader added a third Node for a new pod, %v after the leader's pod was deleted",
		time.Since(deleted).Round(time.Millisecond))

	// Scale-down by the new leader: the pods go, and so does every Node of
	// the pool (taint, drain, delete: more of its RBAC).
	for _, name := range []string{"ic-0", "ic-1", "ic2-0"} {
		if err := l.cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	down := time.Now()
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		n := len(l.poolNodes(t, "incluster"))
		return n == 0, fmt.Sprintf("%d Nodes left in the pool", n)
	})
	t.Logf("the pods deleted, the in-cluster controller removed the pool's 3 Nodes in %v", time.Since(down).Round(time.Millisecond))
	for _, p := range tidePods(t, l) {
		if strings.HasPrefix(next, p.Name+"_") {
			checkTideLogs(t, l, p.Name)
		}
	}
	t.Logf("whole test %v", time.Since(began).Round(time.Millisecond))
}

// tidePods lists tide kube's pods (not those being deleted).
func tidePods(t *testing.T, l *live) []corev1.Pod {
	t.Helper()
	list, err := l.cs.CoreV1().Pods("tide-system").List(context.Background(),
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=tide"})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkTideLogs fails t when tide kube's pod was refused a request
// ("forbidden": its ServiceAccount lacks a permission) or restarted.
func checkTideLogs(t *testing.T, l *live, pod string) {
	t.Helper()
	ctx := context.Background()
	b, err := l.cs.CoreV1().Pods("tide-system").GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", pod, err)
	}
	if len(b) == 0 {
		t.Errorf("%s logged nothing", pod)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("%s was refused a request (rbac.yaml lacks a permission): %s", pod, line)
		}
	}
	p, err := l.cs.CoreV1().Pods("tide-system").Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.RestartCount > 0 {
			t.Errorf("%s restarted %d times (last: %+v)", pod, s.RestartCount, s.LastTerminationState.Terminated)
		}
	}
}

// deleteInCluster deletes tide kube's Deployment and waits (bounded) until
// its pods are gone, while the kubelet Node still runs: they stop cleanly.
func deleteInCluster(t *testing.T, l *live) {
	ctx := context.Background()
	if t.Failed() {
		for _, p := range tidePods(t, l) {
			if b, err := l.cs.CoreV1().Pods("tide-system").GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr(int64(40))}).DoRaw(ctx); err == nil {
				t.Logf("%s log (tail):\n%s", p.Name, b)
			}
		}
	}
	err := l.cs.AppsV1().Deployments("tide-system").Delete(ctx, "tide", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
		return
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		list, err := l.cs.CoreV1().Pods("tide-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=tide"})
		if err == nil && len(list.Items) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The host pool's machine, deleted by the tide kube of this process
	// (still running): the NodePool goes once its machine and Node are gone.
	if code, body, err := l.Do("DELETE", "/apis/tide.dev/v1alpha1/nodepools/host", nil); err != nil || code >= 300 {
		t.Errorf("delete NodePool host: %d %s %v", code, body, err)
		return
	}
	deadline = time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		code, _, err := l.Do("GET", "/apis/tide.dev/v1alpha1/nodepools/host", nil)
		if err == nil && code == 404 && len(l.poolNodes(t, "host")) == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Log("the NodePool host was not gone within 2 minutes; the test's teardown removes its machine")
}

func ptr[T any](v T) *T { return &v }

// tideImage builds tide's container image as scripts/release does (a
// static binary, tools/ociimage, no container daemon) for this machine's
// architecture, named inClusterImage, and returns the OCI archive. Go's
// build cache makes a second build quick.
func tideImage(t *testing.T) string {
	t.Helper()
	began := time.Now()
	_, src, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(src), "..", "..", "..")
	dir := t.TempDir()
	build := func(in string, env []string, args ...string) {
		cmd := exec.Command("go", args...)
		cmd.Dir = in
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	bin, tool, img := filepath.Join(dir, "tide"), filepath.Join(dir, "ociimage"), filepath.Join(dir, "tide.oci.tar")
	build(root, []string{"CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-buildvcs=false"}, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/tide")
	build(filepath.Join(root, "tools", "ociimage"), []string{"GOFLAGS=-buildvcs=false"}, "build", "-o", tool, ".")
	cmd := exec.Command(tool, "--version", "v0.0.0-test", "--binary", runtime.GOARCH+"="+bin, "--ref", inClusterImage, "--out", img)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ociimage: %v\n%s", err, out)
	}
	t.Logf("built tide's image %s in %v", inClusterImage, time.Since(began).Round(time.Millisecond))
	return img
}
