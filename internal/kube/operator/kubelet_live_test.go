package operator_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/cgroups"
	"github.com/tide-project/tide/internal/kube/kubelet"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
	"github.com/tide-project/tide/internal/provider/netns"
)

// kubeletPool is a netns NodePool whose machines join as real kubelet
// Nodes: one 1-CPU offering (the kubelet reserves the rest of this host),
// a label, a taint, the images the test builds, and a quick scale-down.
const kubeletPool = `{"nodes":{"min":0,"max":%d},"provider":{"type":"netns","options":{"prefix":%q,"subnet":"10.233.%d.0/24"}},
  "offerings":[{"type":"k1","cpu":"1","memory":"2Gi","price":1}],
  "scaling":{"idle_timeout":"1s","batch_window":"200ms"},
  "node_labels":{"tier":"kubelet"},"node_taints":[{"key":"tide.dev/test","value":"kubelet","effect":"NoSchedule"}],
  "node_join":{"mode":"kubelet","kubelet":%q,"cni_bin_dir":%q,"sandbox_image":%q,"images":[%q,%q],"token_ttl":"10m"}}`

// TestLiveKubeletNodes: 0 → N on real kubelets. A Deployment of pods that
// fit no Node makes tide create netns machines; each runs its own
// containerd and a kubelet (v1.33, built into the binaries' cache) that
// joins by TLS bootstrap with a bootstrap token tide minted for that machine
// only; the Nodes carry the pool's labels, taint and providerID, become
// Ready, and every pod runs on them (kubectl logs shows what it ran, through
// the apiserver and the kubelet). Deleting the Deployment, the kubelets stop
// the pods and the pool returns to its minimum of 0: every machine deleted,
// its Node removed, its bootstrap token Secret gone. Last, a busy Node is
// drained through the Eviction API (kubeletEviction). The test leaves no
// namespace, link, cgroup, process or changed sysctl behind, even when it
// fails. TIDE_KUBELET_RUNS=n repeats the scale-up n times (figures for
// docs/benchmarks.md).
func TestLiveKubeletNodes(t *testing.T) {
	ks := startKubeletSetup(t)
	l, fw := ks.l, ks.fw
	const n = 3
	l.nodePool(t, "kl", fmt.Sprintf(kubeletPool, n, ks.prefix, ks.third, filepath.Join(l.Bin, "kubelet"), kubetest.CNIBinDir(),
		kubetest.PauseImage, ks.pause, ks.busybox))
	ks.runOperator(t, "kl")

	runs := 1
	if v, err := strconv.Atoi(os.Getenv("TIDE_KUBELET_RUNS")); err == nil && v > 1 {
		runs = v
	}
	var toReady, toRunning, total []time.Duration
	for run := range runs {
		r := l.kubeletRun(t, fmt.Sprintf("hello%d", run), n)
		toReady, toRunning, total = append(toReady, r.toReady...), append(toRunning, r.toRunning...), append(total, r.total...)
		if run == 0 && fw.conns.Load() == 0 {
			t.Fatal("no connection reached the apiserver through the bridge address: the kubelets did not join from their namespaces")
		}
	}
	t.Logf("over %d runs of %d pods: pod created → its Node Ready %s; Node Ready → pod Running %s; pod created → Running %s",
		runs, n, pcts(toReady), pcts(toRunning), pcts(total))
	l.kubeletEviction(t)
}

// kubeletSetup is a test control plane that machines in network
// namespaces reach (at the netns provider's bridge gateway, forwarded to
// the apiserver), with what a kubelet NodePool needs: tide's RBAC, the
// images, the machines' tide binary.
type kubeletSetup struct {
	l              *live
	prefix         string // of the machines' namespaces, links and cgroups
	third          int    // the pool subnet's third octet: 10.233.<third>.0/24
	gw             string // the bridge gateway
	root           string // the operator's --local-root
	bin            string
	pause, busybox string
	api            *url.URL
	fw             *forwarder
}

// startKubeletSetup skips without root, the netns provider or the kubelet;
// it restores the sysctls a kubelet changes and removes every machine,
// namespace, link, cgroup and host path the test leaves, even when it
// fails.
func startKubeletSetup(t *testing.T) *kubeletSetup {
	t.Helper()
	kubetest.RequireKubelet(t)
	if why := netns.Supported(); why != "" {
		t.Skip(why)
	}
	sweepStaleMachines(t)
	saveSysctls(t)
	// A short root: the kubelet's sockets live under its machine's data
	// directory, and a unix socket's path has at most 107 bytes.
	root, err := os.MkdirTemp("", "tk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// The shared plane names the gateway in its certificate (livePlane);
	// its reset runs after the machines are removed (registered before).
	ks := &kubeletSetup{root: root, prefix: fmt.Sprintf("tq%04x", os.Getpid()&0xffff), third: subnetThird()}
	ks.gw = fmt.Sprintf("10.233.%d.1", ks.third)
	ks.l = startLive(t)
	leftovers := hostPathsBefore()
	t.Cleanup(func() { removeKubeletMachines(t, ks.prefix); removeHostPaths(t, leftovers, ks.prefix) }) // after the operator stopped

	ks.pause, ks.busybox = kubetest.Images(t)
	ks.bin = machinesRunTide(t)
	ks.api, err = url.Parse(ks.l.Server)
	if err != nil {
		t.Fatal(err)
	}
	ks.fw = forwardWhenUp(t, ks.prefix+"br", net.JoinHostPort(ks.gw, ks.api.Port()), ks.api.Host)
	return ks
}

// runOperator runs tide kube for the NodePool, its machines joining at the
// bridge gateway.
func (ks *kubeletSetup) runOperator(t *testing.T, pool string) *operator.Operator {
	t.Helper()
	return ks.l.runOperatorWith(t, operator.Options{Identity: pool, Pools: []string{pool}, LocalRoot: ks.root, NodeBinary: ks.bin,
		NodeServer: "https://" + net.JoinHostPort(ks.gw, ks.api.Port()), NodeCA: ks.l.CAFile})
}

// kubeletEviction: a busy kubelet Node is drained through the Eviction
// API. A bare pod gets its own machine; the NodePool is deleted, so tide
// drains every Node of it, busy or not: the pod is evicted (its
// DisruptionTarget condition says EvictionByEvictionAPI), its kubelet stops
// it (SIGTERM: the container's trap exits 0, the pod ends Succeeded), then
// the machine, its Node and token go, and the NodePool with them.
func (l *live) kubeletEviction(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	grace := int64(5)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "evictme", Namespace: "default"}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, NodeSelector: map[string]string{"tier": "kubelet"}, TerminationGracePeriodSeconds: &grace,
		Tolerations: []corev1.Toleration{{Key: "tide.dev/test", Operator: corev1.TolerationOpEqual, Value: "kubelet", Effect: corev1.TaintEffectNoSchedule}},
		Containers: []corev1.Container{{Name: "c", Image: kubetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
			Command:   []string{"sh", "-c", `trap 'echo stopped; exit 0' TERM; echo up; while true; do sleep 0.2; done`},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m")}}}}}}
	if _, err := l.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := l.cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=evictme"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var node string
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		got, err := l.cs.CoreV1().Pods("default").Get(ctx, "evictme", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node = got.Spec.NodeName
		return got.Status.Phase == corev1.PodRunning, fmt.Sprintf("pod %s on %q", got.Status.Phase, node)
	})
	if code, body, err := l.Do("DELETE", "/apis/tide.dev/v1alpha1/nodepools/kl", nil); err != nil || code >= 300 {
		t.Fatalf("delete the NodePool: %d %s %v", code, body, err)
	}
	began := time.Now()
	evicted, exit := false, int32(-1)
	var phase corev1.PodPhase
	deadline := time.After(2 * time.Minute)
	for gone := false; !gone; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the pod watch ended")
			}
			got, _ := ev.Object.(*corev1.Pod)
			if got == nil {
				continue
			}
			for _, c := range got.Status.Conditions {
				evicted = evicted || c.Type == corev1.DisruptionTarget && c.Reason == "EvictionByEvictionAPI"
			}
			for _, cs := range got.Status.ContainerStatuses {
				if cs.State.Terminated != nil {
					exit = cs.State.Terminated.ExitCode
				}
			}
			phase = got.Status.Phase
			gone = ev.Type == "DELETED"
		case <-deadline:
			t.Fatalf("the pod was not drained within 2 minutes (evicted %v, phase %s)", evicted, phase)
		}
	}
	if !evicted || exit != 0 || phase != corev1.PodSucceeded {
		t.Errorf("pod on %s drained: DisruptionTarget by the Eviction API %v, container exit %d, phase %s; want true, 0 (its trap ran on SIGTERM), Succeeded",
			node, evicted, exit, phase)
	}
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		code, _, _ := l.Do("GET", "/apis/tide.dev/v1alpha1/nodepools/kl", nil)
		nn := len(l.poolNodes(t, "kl"))
		secrets, err := l.cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
		if err != nil {
			return false, err.Error()
		}
		_, nsErr := os.Stat("/run/netns/" + l.netnsName(node))
		return code == 404 && nn == 0 && len(secrets.Items) == 0 && nsErr != nil,
			fmt.Sprintf("NodePool %d, %d Nodes, %d tokens, namespace of %s: %v", code, nn, len(secrets.Items), node, nsErr)
	})
	t.Logf("NodePool deleted: the busy Node %s drained through the Eviction API (the kubelet stopped the pod gracefully), machine, Node, token and NodePool gone in %v",
		node, time.Since(began).Round(time.Millisecond))
}

// kubeletFigures are one run's latencies, one per pod.
type kubeletFigures struct{ toReady, toRunning, total []time.Duration }

// kubeletRun is one 0 → n → 0 of TestLiveKubeletNodes with a Deployment
// called name.
func (l *live) kubeletRun(t *testing.T, name string, n int) kubeletFigures {
	t.Helper()
	ctx := context.Background()
	replicas, grace := int32(n), int64(2)
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{"tier": "kubelet"},
				Tolerations:                   []corev1.Toleration{{Key: "tide.dev/test", Operator: corev1.TolerationOpEqual, Value: "kubelet", Effect: corev1.TaintEffectNoSchedule}},
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "hello", Image: kubetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", `trap 'echo stopped; exit 0' TERM; echo "ran on $NODE in $(hostname)"; while true; do sleep 0.2; done`},
					Env:     []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m"),
						corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}}}}
	if _, err := l.cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// Observed every 100 ms: when each pod was first seen, first seen
	// Running, and when each Node was first seen Ready.
	podSeen, podRunning, nodeReady := map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	podNode := map[string]string{}
	var nodes []corev1.Node
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		now := time.Now()
		nodes = l.poolNodes(t, "kl")
		for _, nd := range nodes {
			if _, ok := nodeReady[nd.Name]; !ok && kubeletNodeReady(&nd) {
				nodeReady[nd.Name] = now
			}
		}
		pods, err := l.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods.Items {
			if _, ok := podSeen[p.Name]; !ok {
				podSeen[p.Name] = now
			}
			if p.Status.Phase == corev1.PodRunning {
				if _, ok := podRunning[p.Name]; !ok {
					podRunning[p.Name], podNode[p.Name] = now, p.Spec.NodeName
				}
				running++
			}
		}
		return running == n && len(pods.Items) == n, fmt.Sprintf("%d Nodes (%d Ready), %d of %d pods Running", len(nodes), len(nodeReady), running, n)
	})
	t.Logf("%s: %d pods Running on real kubelet Nodes %v in %v", name, n, names(nodes), time.Since(began).Round(time.Millisecond))

	var fig kubeletFigures
	for p, at := range podRunning {
		ready, ok := nodeReady[podNode[p]]
		if !ok {
			t.Errorf("pod %s Running on %q, a Node never seen Ready", p, podNode[p])
			continue
		}
		fig.toReady = append(fig.toReady, ready.Sub(podSeen[p]))
		fig.toRunning = append(fig.toRunning, at.Sub(ready))
		fig.total = append(fig.total, at.Sub(podSeen[p]))
	}
	if len(nodes) != n {
		t.Errorf("%d Nodes for %d pods of 600m on 1-CPU machines, want %d", len(nodes), n, n)
	}
	for _, nd := range nodes {
		checkKubeletNode(t, l, "kl", &nd)
	}
	secrets, err := l.cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != len(nodes) {
		t.Errorf("%d bootstrap token Secrets for %d machines, want one each", len(secrets.Items), len(nodes))
	}
	for _, s := range secrets.Items {
		if s.Type != corev1.SecretTypeBootstrapToken || !slices.ContainsFunc(nodes, func(nd corev1.Node) bool { return nd.Name == s.Labels[operator.MachineLabel] }) {
			t.Errorf("Secret %s: type %s, machine %q: not the bootstrap token of one of the Nodes", s.Name, s.Type, s.Labels[operator.MachineLabel])
		}
	}
	for p, node := range podNode {
		// Through the apiserver and the pod's kubelet; a container that
		// just started may not have written its line yet.
		want := "ran on " + node + " in " + p
		kubetest.Eventually(t, 20*time.Second, func() (bool, string) {
			logs, err := l.cs.CoreV1().Pods("default").GetLogs(p, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				return false, fmt.Sprintf("logs of pod %s (through the apiserver and the kubelet of %s): %v", p, node, err)
			}
			return strings.Contains(string(logs), want), fmt.Sprintf("pod %s logged %q, want %q", p, logs, want)
		})
	}
	// The pods' containers run in their machine's cgroup.
	for _, nd := range nodes {
		if procs := cgroups.Procs(l.netnsName(nd.Name)); len(procs) == 0 {
			t.Errorf("Node %s: no process in its machine's cgroup /%s", nd.Name, l.netnsName(nd.Name))
		}
	}

	// 0 again: the pods stopped by their kubelets, the machines deleted,
	// their Nodes and tokens gone, nothing left on the host.
	if err := l.cs.AppsV1().Deployments("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	var steps []string
	last := ""
	defer func() { t.Logf("%s: scale-down steps: %s", name, strings.Join(steps, "; ")) }()
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		nn := len(l.poolNodes(t, "kl"))
		pods, err := l.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		secrets, err := l.cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, nd := range nodes {
			ns := l.netnsName(nd.Name)
			if _, err := os.Stat("/run/netns/" + ns); err == nil {
				left = append(left, "netns "+ns)
			}
			left = append(left, cgroups.Exists(ns)...)
		}
		msg := fmt.Sprintf("%d Nodes, %d pods, %d bootstrap token Secrets; left on the host: %v", nn, len(pods.Items), len(secrets.Items), left)
		if msg != last {
			steps = append(steps, fmt.Sprintf("+%v %s", time.Since(began).Round(100*time.Millisecond), msg))
			last = msg
		}
		return nn == 0 && len(pods.Items) == 0 && len(secrets.Items) == 0 && len(left) == 0, msg
	})
	t.Logf("%s: back to 0 Nodes (pods stopped, machines, Nodes and tokens gone) in %v", name, time.Since(began).Round(time.Millisecond))
	return fig
}

// netnsName is the namespace (and cgroup root) of a machine of pool kl.
func (l *live) netnsName(machineID string) string {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), "-"+machineID) {
			return e.Name()
		}
	}
	return "tq-none-" + machineID
}

// checkKubeletNode checks that a Node is a real kubelet's, registered with
// the pool's template.
func checkKubeletNode(t *testing.T, l *live, pool string, nd *corev1.Node) {
	t.Helper()
	if want := operator.ProviderID("netns", nd.Name); nd.Spec.ProviderID != want {
		t.Errorf("Node %s: providerID %q, want %q", nd.Name, nd.Spec.ProviderID, want)
	}
	if nd.Labels["tier"] != "kubelet" || nd.Labels["tide.dev/pool"] != pool {
		t.Errorf("Node %s: labels %v lack the pool's", nd.Name, nd.Labels)
	}
	if !slices.ContainsFunc(nd.Spec.Taints, func(tn corev1.Taint) bool {
		return tn.Key == "tide.dev/test" && tn.Value == "kubelet" && tn.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("Node %s: taints %v lack the pool's", nd.Name, nd.Spec.Taints)
	}
	if v := nd.Status.NodeInfo.KubeletVersion; !strings.HasPrefix(v, "v1.") {
		t.Errorf("Node %s: kubelet version %q: not a real kubelet", nd.Name, v)
	}
	if c := nd.Status.Allocatable[corev1.ResourceCPU]; c.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("Node %s: allocatable cpu %s, want the offering's 1", nd.Name, c.String())
	}
	if !kubeletNodeReady(nd) {
		t.Errorf("Node %s: not Ready: %+v", nd.Name, nd.Status.Conditions)
	}
	// Its client certificate came from the TLS bootstrap: a CSR of the
	// bootstrap token's user, approved and issued.
	csrs, err := l.cs.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range csrs.Items {
		block, _ := pem.Decode(c.Spec.Request)
		if block == nil || len(c.Status.Certificate) == 0 || !strings.HasPrefix(c.Spec.Username, "system:bootstrap:") {
			continue
		}
		if req, err := x509.ParseCertificateRequest(block.Bytes); err == nil && req.Subject.CommonName == "system:node:"+nd.Name {
			found = true
		}
	}
	if !found {
		t.Errorf("Node %s: no issued CSR of a bootstrap token for it", nd.Name)
	}
}

func kubeletNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func names(nodes []corev1.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	sort.Strings(out)
	return out
}

// pcts formats p50/p99/max of ds.
func pcts(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return fmt.Sprintf("p50 %v p99 %v max %v (n=%d)", at(0.5).Round(time.Millisecond), at(0.99).Round(time.Millisecond),
		s[len(s)-1].Round(time.Millisecond), len(s))
}

// sysctlRecord is where saveSysctls also writes the values it saved,
// with its process's pid: a run killed before its cleanup (a panic, go
// test -timeout) leaves it, and the next run writes them back.
const sysctlRecord = "/run/tide-kubelet-test-sysctls.json"

// saveSysctls saves the machine-wide sysctls a kubelet changes and writes
// them back when the test ends (after everything else: registered first).
// The values a killed run saved (sysctlRecord, its process gone) are
// written back first.
func saveSysctls(t *testing.T) {
	t.Helper()
	var rec struct {
		PID    int
		Values map[string]string
	}
	if b, err := os.ReadFile(sysctlRecord); err == nil && json.Unmarshal(b, &rec) == nil {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", rec.PID)); err != nil || strings.TrimSpace(string(comm)) != filepath.Base(os.Args[0]) {
			restoreSysctls(t, rec.Values, fmt.Sprintf("a killed run (pid %d) left it changed", rec.PID))
			_ = os.Remove(sysctlRecord)
		}
	}
	saved := map[string]string{}
	for _, s := range kubelet.SysctlsChanged {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			saved[s] = strings.TrimSpace(string(b))
		}
	}
	if b, err := json.Marshal(map[string]any{"PID": os.Getpid(), "Values": saved}); err == nil {
		if err := os.WriteFile(sysctlRecord, b, 0o644); err != nil {
			t.Logf("recording the sysctls: %v", err)
		}
	}
	t.Cleanup(func() {
		restoreSysctls(t, saved, "the kubelet changed it")
		_ = os.Remove(sysctlRecord)
	})
}

// restoreSysctls writes back the sysctls that differ from saved.
func restoreSysctls(t *testing.T, saved map[string]string, why string) {
	t.Helper()
	for s, v := range saved {
		if b, _ := os.ReadFile("/proc/sys/" + s); strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0o644); err != nil {
			t.Errorf("restore sysctl %s=%s: %v", s, v, err)
		} else {
			t.Logf("restored sysctl %s=%s (%s)", s, v, why)
		}
	}
}

// hostPaths are the fixed paths a kubelet and containerd make whatever
// their configuration says. The kubelets of one host share the first (the
// device plugins' socket, unused here): the test removes it; every other
// must be empty once the machines are gone.
var hostPaths = []string{"/var/lib/kubelet/device-plugins/kubelet.sock", "/var/lib/kubelet/device-plugins",
	"/var/lib/kubelet", "/var/log/containers", "/run/containerd/s", "/run/containerd", "/run/tide-kubelet"}

// hostPathsBefore returns those of hostPaths that exist now.
func hostPathsBefore() map[string]bool {
	out := map[string]bool{}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			out[p] = true
		}
	}
	return out
}

// removeHostPaths removes those of hostPaths the test made, when empty.
// Kubelet machines of another test process on this host (another prefix's
// network namespaces: a concurrent `go test`) may use them too: what is
// left then is an error only when it names this test's prefix.
func removeHostPaths(t *testing.T, before map[string]bool, prefix string) {
	t.Helper()
	others := 0
	nss, _ := os.ReadDir("/run/netns")
	for _, e := range nss {
		if strings.HasPrefix(e.Name(), "tq") && !strings.HasPrefix(e.Name(), prefix+"-") {
			others++
		}
	}
	for _, p := range hostPaths {
		if before[p] {
			continue
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			ents, _ := os.ReadDir(p)
			var left []string
			mine := false
			for _, e := range ents {
				left = append(left, e.Name())
				mine = mine || strings.Contains(e.Name(), prefix)
			}
			if others > 0 && !mine {
				t.Logf("%s holds %v: left to the %d kubelet machines of other tests on this host", p, left, others)
				continue
			}
			t.Errorf("the machines left %s: %v (%v)", p, left, err)
		}
	}
}

// removeKubeletMachines kills whatever runs in a namespace with prefix or
// in its cgroup, removes the cgroup, the namespace (its veth first) and
// every link with prefix: what a failed test may leave.
func removeKubeletMachines(t *testing.T, prefix string) {
	t.Helper()
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		ns := e.Name()
		if !strings.HasPrefix(ns, prefix+"-") {
			continue
		}
		if pids := pidsInNetns(ns); len(pids) > 0 {
			t.Logf("killing %d processes left in namespace %s", len(pids), ns)
			if err := cgroups.KillPIDs(pids, 10*time.Second); err != nil {
				t.Error(err)
			}
		}
	}
	// Cgroups of machines whose namespace is gone too.
	pts, _ := cgroups.Mounted()
	for _, pt := range pts {
		cs, _ := os.ReadDir(pt)
		for _, c := range cs {
			if c.IsDir() && strings.HasPrefix(c.Name(), prefix+"-") {
				if err := errors.Join(cgroups.Kill(c.Name(), 10*time.Second), cgroups.Remove(c.Name())); err != nil {
					t.Error(err)
				} else {
					t.Logf("removed cgroup /%s", c.Name())
				}
			}
		}
	}
	for _, e := range ents {
		if ns := e.Name(); strings.HasPrefix(ns, prefix+"-") {
			_ = exec.Command("ip", "-n", ns, "link", "del", "eth0").Run()
		}
	}
	removeNetns(t, prefix)
}

// pidsInNetns returns the processes in network namespace ns.
func pidsInNetns(ns string) []int {
	nsfi, err := os.Stat("/run/netns/" + ns)
	if err != nil {
		return nil
	}
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if fi, err := os.Stat("/proc/" + d.Name() + "/ns/net"); err == nil && os.SameFile(fi, nsfi) {
			out = append(out, pid)
		}
	}
	return out
}
