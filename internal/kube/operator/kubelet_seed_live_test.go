package operator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
)

// kubeletGPUPool is a netns NodePool in kubelet mode whose 1-CPU machines
// each have one GPU (nvidia.com/gpu, advertised by the test's device
// plugin), run by seed 001's utilization policy: min utilization 80 %, a
// scale-down delay of 20 s (the seed's 10 minutes, shortened).
const kubeletGPUPool = `{"nodes":{"min":0,"max":8},"provider":{"type":"netns","options":{"prefix":%q,"subnet":"10.233.%d.0/24"}},
  "offerings":[{"type":"k1","cpu":"1","memory":"2Gi","gpus":1,"price":1}],
  "scaling":{"policy":"utilization","min_utilization":80,"scale_down_delay":"20s","batch_window":"200ms"},
  "node_labels":{"tier":"gpu"},"node_taints":[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}],
  "node_join":{"mode":"kubelet","kubelet":%q,"cni_bin_dir":%q,"sandbox_image":%q,"images":[%q,%q],"token_ttl":"10m"}}`

// devicePlugin does for every Node of pool what a GPU device plugin does:
// once the kubelet registered the Node, its status shows one
// nvidia.com/gpu in capacity and allocatable (a Node status patch, which
// the kubelet keeps: it owns only the device plugins it serves). It runs
// until the test ends and returns how many Nodes it patched.
func (l *live) devicePlugin(t *testing.T, pool string) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	patched := map[string]bool{}
	patch := []byte(`{"status":{"capacity":{"nvidia.com/gpu":"1"},"allocatable":{"nvidia.com/gpu":"1"}}}`)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			list, err := l.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: demand.PoolLabel + "=" + pool})
			if err == nil {
				for _, n := range list.Items {
					if q, ok := n.Status.Allocatable[demand.GPUResource]; ok && q.Value() == 1 {
						continue
					}
					if _, err := l.cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err == nil {
						mu.Lock()
						patched[n.Name] = true
						mu.Unlock()
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(patched)
	}
}

// TestLiveKubeletSeed001A plays seed 001's scenario A on real kubelet Nodes,
// at 1/20 of the seed's size: 120 eight-GPU Nodes, 80 utilized, become 6
// one-GPU Nodes, 4 utilized. Six one-GPU pods make tide create six netns
// machines that join as kubelets; the test's device plugin advertises each
// Node's GPU (an extended resource in the Node's status) and every pod runs
// on its own Node. Two pods are deleted: 4 of 6 GPUs used is 66 %, below
// the 80 % minimum, so the target is ⌈4 / 0.8⌉ = 5 and one empty Node is
// tainted as a deletion candidate; when the delay has passed it is drained
// and deleted (machine, Node and token gone), the pool is at 5, and no
// utilized Node or pod was touched. Then everything goes and the host is
// left clean.
func TestLiveKubeletSeed001A(t *testing.T) {
	ks := startKubeletSetup(t)
	l := ks.l
	ctx := context.Background()
	const pool = "sa"
	l.nodePool(t, pool, fmt.Sprintf(kubeletGPUPool, ks.prefix, ks.third, filepath.Join(l.Bin, "kubelet"), kubetest.CNIBinDir(),
		kubetest.PauseImage, ks.pause, ks.busybox))
	op := ks.runOperator(t, pool)
	advertised := l.devicePlugin(t, pool)

	gpu := *resource.NewQuantity(1, resource.DecimalSI)
	grace := int64(1)
	for i := range 6 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sa-%d", i), Namespace: "default", Labels: map[string]string{"seed": pool}},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"tier": "gpu"}, TerminationGracePeriodSeconds: &grace,
				Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "train", Image: kubetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", `trap 'exit 0' TERM; echo "training on $NODE"; while true; do sleep 0.2; done`},
					Env:     []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), demand.GPUResource: gpu},
						Limits:   corev1.ResourceList{demand.GPUResource: gpu}}}}}}
		if _, err := l.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	podNode := map[string]string{}
	kubetest.Eventually(t, 4*time.Minute, func() (bool, string) {
		pods, err := l.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "seed=" + pool})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
				podNode[p.Name] = p.Spec.NodeName
			}
		}
		return running == 6, fmt.Sprintf("%d Nodes (%d advertised a GPU), %d of 6 pods Running", len(l.poolNodes(t, pool)), advertised(), running)
	})
	nodes := l.poolNodes(t, pool)
	t.Logf("6 one-GPU pods Running on real kubelet Nodes %v in %v", names(nodes), time.Since(began).Round(time.Millisecond))
	if len(nodes) != 6 {
		t.Fatalf("%d Nodes for 6 one-GPU pods on one-GPU machines, want 6", len(nodes))
	}
	used := map[string]bool{}
	for p, n := range podNode {
		if used[n] {
			t.Fatalf("pod %s shares Node %s: a Node has one GPU", p, n)
		}
		used[n] = true
	}
	for _, nd := range nodes {
		if v := nd.Status.NodeInfo.KubeletVersion; !strings.HasPrefix(v, "v1.") {
			t.Fatalf("Node %s: kubelet version %q: not a real kubelet", nd.Name, v)
		}
	}

	// t = 0 of scenario A: 4 of 6 GPUs used.
	zero := int64(0)
	for _, name := range []string{"sa-4", "sa-5"} {
		if err := l.cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	keep := map[string]string{}
	for i := range 4 {
		name := fmt.Sprintf("sa-%d", i)
		keep[name] = podNode[name]
	}
	floor := 5 // no utilized Node is ever taken, and nothing goes below the target
	var marked string
	state := func() (nodes, marks, target int) {
		ns := l.poolNodes(t, pool)
		if len(ns) < floor {
			t.Fatalf("%d Nodes, below the floor of %d", len(ns), floor)
		}
		for _, n := range ns {
			if !demand.Mark(&n).IsZero() {
				marks++
				marked = n.Name
			}
		}
		st, _ := op.PoolStatus(pool)
		return len(ns), marks, st.Desired
	}
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		n, m, target := state()
		return n == 6 && m == 1 && target == 5, fmt.Sprintf("%d Nodes, %d tainted, target %d; want 6, 1, 5", n, m, target)
	})
	markedAt := time.Now()
	for p, n := range keep {
		if n == marked {
			t.Fatalf("Node %s of utilized pod %s was tainted as a deletion candidate", n, p)
		}
	}
	t.Logf("t=0: 4 of 6 GPUs used (66 %% < 80 %%): target 5, Node %s tainted %s", marked, demand.MarkTaintKey)
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		n, m, target := state()
		return n == 5 && m == 0 && target == 5, fmt.Sprintf("%d Nodes, %d tainted, target %d; want 5, 0, 5", n, m, target)
	})
	if gone := time.Since(markedAt); gone < 15*time.Second {
		t.Fatalf("the tainted Node went %v after its taint was seen: the 20 s delay was not kept", gone)
	}
	t.Logf("t=delay: Node %s deprovisioned %v after it was tainted; 5 Nodes", marked, time.Since(markedAt).Round(time.Millisecond))
	kubetest.Eventually(t, time.Minute, func() (bool, string) {
		secrets, err := l.cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
		if err != nil {
			return false, err.Error()
		}
		_, nsErr := os.Stat("/run/netns/" + l.netnsName(marked))
		return len(secrets.Items) == 5 && nsErr != nil, fmt.Sprintf("%d bootstrap tokens (want 5), namespace of %s: %v", len(secrets.Items), marked, nsErr)
	})
	for p, n := range keep {
		got, err := l.cs.CoreV1().Pods("default").Get(ctx, p, metav1.GetOptions{})
		if err != nil || got.Spec.NodeName != n || got.Status.Phase != corev1.PodRunning {
			t.Fatalf("utilized pod %s: %v on %q (was on %s), want Running there", p, err, got.Spec.NodeName, n)
		}
	}

	// The end: the pods and the NodePool go, so do the machines.
	for p := range keep {
		if err := l.cs.CoreV1().Pods("default").Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	if code, body, err := l.Do("DELETE", "/apis/tide.dev/v1alpha1/nodepools/"+pool, nil); err != nil || code >= 300 {
		t.Fatalf("delete the NodePool: %d %s %v", code, body, err)
	}
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		floor = 0
		code, _, _ := l.Do("GET", "/apis/tide.dev/v1alpha1/nodepools/"+pool, nil)
		left := 0
		ents, _ := os.ReadDir("/run/netns")
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ks.prefix+"-") {
				left++
			}
		}
		return code == 404 && len(l.poolNodes(t, pool)) == 0 && left == 0, fmt.Sprintf("NodePool %d, %d Nodes, %d namespaces", code, len(l.poolNodes(t, pool)), left)
	})
}
