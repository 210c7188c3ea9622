package operator_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubetest"
)

// benchSize returns n under TIDE_KUBE_BENCH=1 (the figures of
// docs/benchmarks.md) and small otherwise (the default suite).
func benchSize(t *testing.T, full, small int) int {
	t.Helper()
	if os.Getenv("TIDE_KUBE_BENCH") == "1" {
		return full
	}
	return small
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// createMany creates n pods named prefix-i with spec, 32 at a time.
func (l *live) createMany(t *testing.T, prefix string, n int, labels map[string]string, spec corev1.PodSpec) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var mu sync.Mutex
	var first error
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: "default", Labels: labels}, Spec: spec}
			if _, err := l.cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// TestLiveSpeed measures, on the live cluster, (1) the time from a pod seen
// Unschedulable to the pass that launched its Node (provider Create), over
// pods created one every 100 ms, each needing a Node of its own; (2) one pass
// over 1,000 pending pods: it launches every Node they need at once; (3) the
// RSS of a `tide kube` process whose informers hold 5,000 pods. Sizes are
// small by default; TIDE_KUBE_BENCH=1 runs 100 / 1,000 / 5,000 (the figures
// in docs/benchmarks.md).
func TestLiveSpeed(t *testing.T) {
	l := startLive(t)
	ctx := context.Background()

	// (1) Unschedulable → Create.
	nLat := benchSize(t, 100, 5)
	l.nodePool(t, "lat", strings.Replace(fmt.Sprintf(gpuPool, "1h"), `"max":20`, `"max":200`, 1))
	op, _, _ := l.runOperator(t, "lat", "lat")
	for i := range nLat {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lat-%d", i), Namespace: "default", Labels: map[string]string{"bench": "lat"}},
			Spec: gpuPodSpec(8, map[string]string{"accelerator": "nvidia"})}
		if _, err := l.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // pacing the arrivals, not a correctness wait
	}
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		r, n := l.runningPods(t, "default", "bench=lat")
		return r == nLat && len(op.Latencies()) > 0, fmt.Sprintf("%d/%d running, %d samples", r, n, len(op.Latencies()))
	})
	lat := op.Latencies()
	// A pod the scheduler binds to a Node launched for an earlier one
	// never waits: it has no sample.
	t.Logf("Unschedulable → provider Create over %d waiting pods: p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d Nodes",
		len(lat), 1000*quantile(lat, 0.5), 1000*quantile(lat, 0.99), 1000*quantile(lat, 1), len(l.poolNodes(t, "lat")))
	if n := len(l.poolNodes(t, "lat")); n != nLat {
		t.Fatalf("%d Nodes for %d eight-GPU pods, want %d", n, nLat, nLat)
	}

	// (2) One pass over many pending pods, on a pass-driven operator.
	nPend := benchSize(t, 1000, 40)
	l.nodePool(t, "many", `{"nodes":{"min":0,"max":1000},"provider":{"type":"kwok"},
  "offerings":[{"type":"g8","cpu":"32","memory":"256Gi","gpus":8,"price":24.5}],
  "node_labels":{"tier":"many"},"node_taints":[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}],
  "scaling":{"policy":"utilization","min_utilization":50,"scale_down_delay":"1h"}}`)
	pop := l.passOperator(t, clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), nil, "many")
	l.createMany(t, "many", nPend, map[string]string{"bench": "many"}, gpuPodSpec(1, map[string]string{"tier": "many"}))
	kubetest.Eventually(t, 2*time.Minute, func() (bool, string) {
		list, err := l.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "bench=many"})
		if err != nil {
			return false, err.Error()
		}
		u := 0
		for i := range list.Items {
			if demand.Unschedulable(&list.Items[i]) {
				u++
			}
		}
		var sample any
		if len(list.Items) > 0 {
			sample = list.Items[0].Status
		}
		return u == nPend, fmt.Sprintf("%d of %d pods (%d listed) marked Unschedulable by the scheduler; e.g. %+v", u, nPend, len(list.Items), sample)
	})
	start := time.Now()
	if err := pop.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	st, _ := pop.PoolStatus("many")
	want := (nPend + 7) / 8
	t.Logf("one pass over %d pending pods: %v; desired %d, launching %d", nPend, took.Round(time.Millisecond), st.Desired, st.Pending)
	if st.Desired != want || st.Pending+st.Current != want {
		t.Fatalf("after one pass: %+v, want all %d Nodes launched", st, want)
	}

	// (3) Memory of a `tide kube` process holding many pods.
	nMem := benchSize(t, 5000, 200)
	r := l.startReplica(t, "mem")
	rss := func() int {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.Atoi(f[1])
				return kb / 1024
			}
		}
		return 0
	}
	// Let it settle (measurement, not correctness; shorter at the small
	// default size, where the figure is only logged).
	time.Sleep(time.Duration(benchSize(t, 3, 1)) * time.Second)
	before := rss()
	l.createMany(t, "mem", nMem, map[string]string{"bench": "mem"}, corev1.PodSpec{
		NodeSelector: map[string]string{"tier": "none"}, Containers: []corev1.Container{{Name: "c", Image: "x"}}})
	time.Sleep(time.Duration(benchSize(t, 5, 2)) * time.Second) // informers catch up and a few passes run
	after := rss()
	t.Logf("tide kube RSS: %d MiB idle, %d MiB with %d more pods in its informers (%d pods in all)", before, after, nMem, nMem+nPend+nLat)
}
