package operator_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
)

// TestLiveKubeletFailoverKill9: two `tide kube` replicas (processes) run a
// kubelet NodePool; the one holding the Lease is killed with SIGKILL as
// soon as it created its first machine of a 3-pod scale-up. The standby
// takes the Lease, adopts what the first created and finishes: 3 real
// kubelet Nodes (one machine, one namespace, one bootstrap token each;
// none created twice), every pod Running. Deleting the Deployment, the pool
// returns to 0 and no machine, Node, token or namespace is left.
func TestLiveKubeletFailoverKill9(t *testing.T) {
	ks := startKubeletSetup(t)
	l := ks.l
	ctx := context.Background()
	const n = 3
	l.nodePool(t, "kf", fmt.Sprintf(kubeletPool, n, ks.prefix, ks.third, filepath.Join(l.Bin, "kubelet"), kubetest.CNIBinDir(),
		kubetest.PauseImage, ks.pause, ks.busybox))
	env := []string{"TIDE_KUBE_POOLS=kf", "TIDE_KUBE_LOCAL_ROOT=" + ks.root, "TIDE_KUBE_NODE_BINARY=" + ks.bin,
		"TIDE_KUBE_NODE_SERVER=https://" + net.JoinHostPort(ks.gw, ks.api.Port()), "TIDE_KUBE_NODE_CA=" + l.CAFile}
	a := l.startReplicaWith(t, "replica-a", env...)
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		h := l.holder(t)
		return h == "replica-a", "Lease held by " + h
	})
	b := l.startReplicaWith(t, "replica-b", env...)
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		code, body := get(t, "http://"+b.probes+"/readyz")
		return code == 200, fmt.Sprintf("standby /readyz: %d %s", code, body)
	})
	replicas, grace := int32(n), int64(1)
	labels := map[string]string{"app": "kf"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "kf", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{"tier": "kubelet"},
				Tolerations:                   []corev1.Toleration{{Key: "tide.dev/test", Operator: corev1.TolerationOpEqual, Value: "kubelet", Effect: corev1.TaintEffectNoSchedule}},
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "c", Image: kubetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
					Command:   []string{"sh", "-c", `trap 'exit 0' TERM; while true; do sleep 0.2; done`},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m")}}}}}}}}
	if _, err := l.cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	namespaces := func() []string {
		var out []string
		ents, _ := os.ReadDir("/run/netns")
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ks.prefix+"-") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	// Kill the acting replica as soon as its first machine exists.
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		ns := namespaces()
		return len(ns) > 0, fmt.Sprintf("machines' namespaces %v", ns)
	})
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	began := time.Now()
	t.Logf("replica-a killed with the machines %v, %d Nodes", namespaces(), len(l.poolNodes(t, "kf")))
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		h := l.holder(t)
		return h == "replica-b", "Lease held by " + h
	})
	t.Logf("replica-b holds the Lease %v after the kill", time.Since(began).Round(time.Millisecond))
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		r, all := l.runningPods(t, "default", "app=kf")
		return r == n, fmt.Sprintf("%d of %d pods Running on %d Nodes, machines %v", r, all, len(l.poolNodes(t, "kf")), namespaces())
	})
	nodes := l.poolNodes(t, "kf")
	secrets, err := l.cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
	if err != nil {
		t.Fatal(err)
	}
	if ns := namespaces(); len(nodes) != n || len(ns) != n || len(secrets.Items) != n {
		t.Fatalf("%d Nodes %v, machines %v, %d bootstrap tokens; want %d of each (a machine created twice?)", len(nodes), names(nodes), ns, len(secrets.Items), n)
	}
	for _, nd := range nodes {
		checkKubeletNode(t, l, "kf", &nd)
	}
	t.Logf("replica-b finished %v after the kill: %d pods Running on real kubelet Nodes %v", time.Since(began).Round(time.Millisecond), n, names(nodes))
	began = time.Now()
	if err := l.cs.AppsV1().Deployments("default").Delete(ctx, "kf", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		secrets, err := l.cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
		if err != nil {
			return false, err.Error()
		}
		nn, ns := len(l.poolNodes(t, "kf")), namespaces()
		return nn == 0 && len(ns) == 0 && len(secrets.Items) == 0, fmt.Sprintf("%d Nodes, machines %v, %d tokens", nn, ns, len(secrets.Items))
	})
	t.Logf("Deployment deleted: back to 0 Nodes, machines and tokens in %v", time.Since(began).Round(time.Millisecond))
}
