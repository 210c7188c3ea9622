package operator_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/nodeagent"
	"github.com/tide-project/tide/internal/kube/operator"
)

// asTide makes the test binary the tide command (TestMain).
const asTide = "TIDE_TEST_AS_TIDE"

// machinesRunTide makes the processes this test starts from now on (the
// machines, the plugins) run the test binary as the tide command, marked
// so that killMarked finds any a failed test left running; it returns the
// binary.
func machinesRunTide(t *testing.T) string {
	t.Helper()
	marker := fmt.Sprintf("TIDE_KUBE_TEST_MACHINE=%d-%d", os.Getpid(), time.Now().UnixNano())
	k, v, _ := strings.Cut(marker, "=")
	t.Setenv(asTide, "1")
	t.Setenv(k, v)
	t.Cleanup(func() { killMarked(t, marker) }) // runs after the operator stopped
	return os.Args[0]
}

const localPool = `{"nodes":{"min":0,"max":4},"provider":{"type":"local"},
  "offerings":[{"type":"l4","cpu":"4","memory":"8Gi","price":1}],
  "node_labels":{"tier":"local"}}`

// TestLiveLocalMachinesJoin: a NodePool on the local provider. Pending pods
// make tide create local machines (processes of this host); each gets its
// own join credential (a ServiceAccount token whose RBAC allows Nodes and
// node Leases only) and runs the node agent, which registers its Node with
// the providerID tide://local/<machine>, the pool's labels and the
// offering's capacity, and keeps it Ready and its Lease fresh; the
// scheduler binds the pods there. When the pods go, the pool scales down:
// the machines are deleted, their credentials revoked (a token of theirs
// is refused) and their Nodes removed, for good.
func TestLiveLocalMachinesJoin(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()
	l.nodePool(t, "loc", localPool)
	bin := machinesRunTide(t)
	l.runOperatorWith(t, operator.Options{Identity: "loc", Pools: []string{"loc"}, LocalRoot: t.TempDir(),
		NodeBinary: bin, NodeHeartbeat: time.Second})

	l.cpuPods(t, "loc", "local", 2)
	began := time.Now()
	nodes := l.boundNodes(t, "loc", "loc", 2, 2*time.Minute)
	t.Logf("2 local machines joined as Nodes and got the pods bound in %v", time.Since(began).Round(time.Millisecond))
	for _, n := range nodes {
		if want := operator.ProviderID("local", n.Name); n.Spec.ProviderID != want {
			t.Errorf("Node %s: providerID %q, want %q", n.Name, n.Spec.ProviderID, want)
		}
		if n.Labels["tier"] != "local" {
			t.Errorf("Node %s: labels %v lack the pool's tier=local", n.Name, n.Labels)
		}
		if c := n.Status.Capacity[corev1.ResourceCPU]; c.Cmp(resource.MustParse("4")) != 0 {
			t.Errorf("Node %s: cpu capacity %s, want the offering's 4", n.Name, c.String())
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && c.Reason == nodeagent.ReadyReason
		}
		if !ready {
			t.Errorf("Node %s: not Ready by the node agent: %+v", n.Name, n.Status.Conditions)
		}
	}
	// The agent keeps the Lease fresh.
	name := nodes[0].Name
	var first time.Time
	kubetest.Eventually(t, 30*time.Second, func() (bool, string) {
		lease, err := l.cs.CoordinationV1().Leases(nodeagent.LeaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		first = lease.Spec.RenewTime.Time
		return *lease.Spec.HolderIdentity == name, fmt.Sprintf("Lease held by %s", *lease.Spec.HolderIdentity)
	})
	kubetest.Eventually(t, 30*time.Second, func() (bool, string) {
		l2, err := l.cs.CoordinationV1().Leases(nodeagent.LeaseNamespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil && l2.Spec.RenewTime.After(first), "the Lease of " + name + " is not renewed"
	})

	// The credential is the machine's own and narrow: a token of its
	// ServiceAccount reads its Node but cannot list pods.
	mc := l.machineClient(t, "tide-node-"+name)
	if _, err := mc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the machine's credential cannot read its Node: %v", err)
	}
	if _, err := mc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the machine's credential lists pods: %v, want Forbidden", err)
	}

	// The pods go: the pool scales down to 0.
	for i := range 2 {
		if err := l.cs.CoreV1().Pods("default").Delete(ctx, fmt.Sprintf("loc-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	began = time.Now()
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		n := len(l.poolNodes(t, "loc"))
		sas, err := l.cs.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
		if err != nil {
			return false, err.Error()
		}
		return n == 0 && len(sas.Items) == 0, fmt.Sprintf("%d Nodes, %d machine ServiceAccounts left", n, len(sas.Items))
	})
	t.Logf("scaled down: machines deleted, credentials revoked, Nodes removed in %v", time.Since(began).Round(time.Millisecond))
	revoked(t, mc, name)
	deadline := time.Now().Add(3 * time.Second) // three heartbeats of a surviving agent
	for time.Now().Before(deadline) {
		if n := len(l.poolNodes(t, "loc")); n != 0 {
			t.Fatalf("%d Nodes came back after the scale-down", n)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// revoked waits until a token of a deleted machine (mc, whose Node was
// name) no longer authenticates. The apiserver authenticates a token of a
// deleted ServiceAccount until its informer has seen the deletion, a few
// seconds after a quick scale-down; the token must never again read the
// Node, and must stop authenticating soon.
func revoked(t *testing.T, mc *kubernetes.Clientset, name string) {
	t.Helper()
	kubetest.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := mc.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			t.Fatal("a token of the deleted machine still reads its Node")
		}
		return apierrors.IsUnauthorized(err), fmt.Sprintf("a token of the deleted machine still authenticates: %v", err)
	})
}

// machineClient is a client with a fresh token of the machine's
// ServiceAccount: the same RBAC as the token the machine got.
func (l *live) machineClient(t *testing.T, sa string) *kubernetes.Clientset {
	t.Helper()
	secs := int64(600)
	tr, err := l.cs.CoreV1().ServiceAccounts("default").CreateToken(context.Background(), sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s: %v", sa, err)
	}
	admin, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: admin.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// runOperatorWith runs `tide kube` in this process with o (kubeconfig,
// namespace default, fast election and passes filled in) until the test
// ends.
func (l *live) runOperatorWith(t *testing.T, o operator.Options) *operator.Operator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan *operator.Operator, 1)
	done := make(chan error, 1)
	o.Kubeconfig, o.Namespace, o.LeaderElection = l.Kubeconfig, "default", true
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 6*time.Second, 4*time.Second, 500*time.Millisecond
	o.Interval, o.Batch = time.Second, 100*time.Millisecond
	o.Started = func(op *operator.Operator) { started <- op }
	go func() { done <- operator.Run(ctx, o) }()
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
		return op
	case err := <-done:
		t.Fatalf("tide kube: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("tide kube did not take the Lease")
	}
	return nil
}

// killMarked kills every process whose environment holds marker: the
// machines a failed test left running.
func killMarked(t *testing.T, marker string) {
	t.Helper()
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + d.Name() + "/environ")
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), marker) {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
			t.Logf("killed machine process %d left running", pid)
		}
	}
}
