package operator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/cli"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
)

// TestMain lets the test binary be a `tide kube` replica: with
// TIDE_KUBE_REPLICA set it runs operator.Run (as the CLI does) until killed.
// With TIDE_TEST_AS_TIDE set it is the tide command itself (cmd/tide):
// what machines on this host run (`tide worker --bootstrap -`, which a join
// document makes the Node agent) and the plugins they are served by (`tide
// provider serve-local`).
func TestMain(m *testing.M) {
	if id := os.Getenv("TIDE_KUBE_REPLICA"); id != "" && os.Getenv(asTide) != "" {
		// A replica whose machines run on this host (startReplicaWith):
		// they inherit asTide, not the replica's identity.
		os.Unsetenv("TIDE_KUBE_REPLICA")
		var pools []string
		if p := os.Getenv("TIDE_KUBE_POOLS"); p != "" {
			pools = strings.Split(p, ",")
		}
		err := operator.Run(context.Background(), operator.Options{Kubeconfig: os.Getenv("TIDE_KUBE_KUBECONFIG"), Namespace: "default",
			Identity: id, LeaderElection: true, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second,
			RetryPeriod: 500 * time.Millisecond, ProbeAddr: os.Getenv("TIDE_KUBE_PROBES"), Interval: time.Second, Batch: 100 * time.Millisecond,
			Pools: pools, LocalRoot: os.Getenv("TIDE_KUBE_LOCAL_ROOT"), NodeBinary: os.Getenv("TIDE_KUBE_NODE_BINARY"),
			NodeServer: os.Getenv("TIDE_KUBE_NODE_SERVER"), NodeCA: os.Getenv("TIDE_KUBE_NODE_CA"),
			Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
		fmt.Fprintf(os.Stderr, "tide kube replica %s: %v\n", id, err)
		os.Exit(1)
	}
	if os.Getenv(asTide) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		go func() { <-ctx.Done(); stop() }()
		code := cli.Main(ctx, os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
		stop()
		os.Exit(code)
	}
	if id := os.Getenv("TIDE_KUBE_REPLICA"); id != "" {
		err := operator.Run(context.Background(), operator.Options{Kubeconfig: os.Getenv("TIDE_KUBE_KUBECONFIG"), Namespace: "default",
			Identity: id, LeaderElection: true, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second,
			RetryPeriod: 500 * time.Millisecond, ProbeAddr: os.Getenv("TIDE_KUBE_PROBES"), Interval: time.Second, Batch: 100 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
		fmt.Fprintf(os.Stderr, "tide kube replica %s: %v\n", id, err)
		os.Exit(1)
	}
	code := kubetest.Main(m, livePlane())
	awstest.StopMoto()
	os.Exit(code)
}

// replica is a `tide kube` process.
type replica struct {
	id     string
	cmd    *exec.Cmd
	log    string
	probes string
	done   chan struct{}
}

func (l *live) startReplica(t *testing.T, id string) *replica {
	t.Helper()
	return l.startReplicaWith(t, id)
}

// startReplicaWith starts a replica with more of its environment (the
// TIDE_KUBE_* settings TestMain reads).
func (l *live) startReplicaWith(t *testing.T, id string, env ...string) *replica {
	t.Helper()
	r := &replica{id: id, log: filepath.Join(t.TempDir(), id+".log"), probes: freeAddr(t), done: make(chan struct{})}
	f, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(os.Args[0], "-test.run=^$")
	r.cmd.Env = append(os.Environ(), "TIDE_KUBE_REPLICA="+id, "TIDE_KUBE_KUBECONFIG="+l.Kubeconfig, "TIDE_KUBE_PROBES="+r.probes)
	r.cmd.Env = append(r.cmd.Env, env...)
	r.cmd.Stdout, r.cmd.Stderr = f, f
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = r.cmd.Wait()
		f.Close()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
		if t.Failed() {
			b, _ := os.ReadFile(r.log)
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("replica %s log (tail):\n%s", id, b)
		}
	})
	return r
}

// holder returns the identity holding the `tide kube` Lease.
func (l *live) holder(t *testing.T) string {
	t.Helper()
	lease, err := l.cs.CoordinationV1().Leases("default").Get(context.Background(), operator.LeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// TestLiveFailoverKill9 runs two `tide kube` replicas as real processes;
// the one holding the Lease is killed with SIGKILL while a Deployment of 150
// one-GPU pods is scaling up. The other takes the Lease over, raises the
// pool's epoch, adopts what the first created and finishes: exactly
// ceil(150/8) = 19 Nodes exist (none created twice), every pod runs, and
// scaled to 0 every Node is deleted (none leaked).
func TestLiveFailoverKill9(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()
	l.nodePool(t, "fo", fmt.Sprintf(gpuPool, "2s"))
	a := l.startReplica(t, "replica-a")
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		h := l.holder(t)
		return h == "replica-a", "Lease held by " + h
	})
	b := l.startReplica(t, "replica-b")
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		code, body := get(t, "http://"+b.probes+"/readyz")
		return code == 200, fmt.Sprintf("standby /readyz: %d %s", code, body)
	})
	replicas := int32(150)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fo", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fo"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "fo"}},
				Spec: gpuPodSpec(1, map[string]string{"accelerator": "nvidia"})}}}
	if _, err := l.cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Kill the acting replica as soon as its first Node exists.
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		n := len(l.poolNodes(t, "fo"))
		return n > 0, fmt.Sprintf("%d Nodes", n)
	})
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	killedAt := len(l.poolNodes(t, "fo"))
	r, _ := l.runningPods(t, "default", "app=fo")
	t.Logf("replica-a killed with %d Nodes and %d pods running", killedAt, r)
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		h := l.holder(t)
		return h == "replica-b", "Lease held by " + h
	})
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		r, n := l.runningPods(t, "default", "app=fo")
		return r == 150, fmt.Sprintf("%d of %d pods running on %d Nodes", r, n, len(l.poolNodes(t, "fo")))
	})
	if n := len(l.poolNodes(t, "fo")); n != 19 {
		t.Fatalf("%d Nodes for 150 one-GPU pods on 8-GPU Nodes, want 19 (a Node created twice?)", n)
	}
	// Scale to 0: every Node goes, none leaks.
	l.scale(t, "fo", 0)
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		n := len(l.poolNodes(t, "fo"))
		return n == 0, fmt.Sprintf("%d Nodes left", n)
	})
	all, err := l.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 0 {
		t.Fatalf("%d Nodes leaked", len(all.Items))
	}
}
