package operator_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/cgroups"
	"github.com/tide-project/tide/internal/kube/kubelet"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/operator"
	"github.com/tide-project/tide/internal/provider/netns"
)

// TestLiveNetnsMachinesJoin: a netns NodePool. Its machine is a network
// namespace on a bridge the provider creates; its agent (`tide worker
// --bootstrap -` run inside the namespace) reaches the apiserver over the
// bridge, at the gateway address given with --node-apiserver, and not over
// loopback (the test cluster's apiserver binds 127.0.0.1, so the test
// listens on the gateway and forwards to it, as an apiserver listening on
// every address would serve). The Node registers with tide://netns/<id>
// and gets the pod; scaled to 0 the namespace, the Node and the credential
// go. The test removes every namespace and link with its prefix, even on
// failure.
func TestLiveNetnsMachinesJoin(t *testing.T) {
	if why := netns.Supported(); why != "" {
		t.Skip(why)
	}
	l := startLive(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("tk%04x", os.Getpid()&0xffff)
	third := subnetThird()
	gw := fmt.Sprintf("10.233.%d.1", third)
	t.Cleanup(func() { removeNetns(t, prefix) }) // after the operator stopped
	bin := machinesRunTide(t)
	api, err := url.Parse(l.Server)
	if err != nil {
		t.Fatal(err)
	}
	fw := forwardWhenUp(t, prefix+"br", net.JoinHostPort(gw, api.Port()), api.Host)
	l.nodePool(t, "nsp", fmt.Sprintf(`{"nodes":{"min":0,"max":2},"provider":{"type":"netns","options":{"prefix":%q,"subnet":"10.233.%d.0/24"}},
  "offerings":[{"type":"n2","cpu":"2","memory":"4Gi","price":1}],"node_labels":{"tier":"netns"}}`, prefix, third))
	l.runOperatorWith(t, operator.Options{Identity: "nsp", Pools: []string{"nsp"}, LocalRoot: t.TempDir(), NodeBinary: bin,
		NodeHeartbeat: time.Second, NodeServer: "https://" + net.JoinHostPort(gw, api.Port())})

	zero := int64(0)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nsp-0", Namespace: "default"},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"tier": "netns"}, TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}
	if _, err := l.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var nodes []corev1.Node
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		nodes = l.poolNodes(t, "nsp")
		pod, err := l.cs.CoreV1().Pods("default").Get(ctx, "nsp-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(nodes) == 1 && pod.Spec.NodeName == nodes[0].Name, fmt.Sprintf("%d Nodes, pod on %q", len(nodes), pod.Spec.NodeName)
	})
	t.Logf("the netns machine joined as a Node over the bridge and got the pod in %v", time.Since(began).Round(time.Millisecond))
	id := nodes[0].Name
	if want := operator.ProviderID("netns", id); nodes[0].Spec.ProviderID != want {
		t.Errorf("Node %s: providerID %q, want %q", id, nodes[0].Spec.ProviderID, want)
	}
	if _, err := os.Stat("/run/netns/" + prefix + "-" + id); err != nil {
		t.Errorf("machine %s has no namespace: %v", id, err)
	}
	if n := fw.conns.Load(); n == 0 {
		t.Fatal("no connection reached the apiserver through the bridge address: the machine did not join from its namespace")
	}

	if err := l.cs.CoreV1().Pods("default").Delete(ctx, "nsp-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		n := len(l.poolNodes(t, "nsp"))
		sas, err := l.cs.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
		if err != nil {
			return false, err.Error()
		}
		_, nsErr := os.Stat("/run/netns/" + prefix + "-" + id)
		return n == 0 && len(sas.Items) == 0 && os.IsNotExist(nsErr),
			fmt.Sprintf("%d Nodes, %d machine ServiceAccounts, namespace: %v", n, len(sas.Items), nsErr)
	})
	t.Logf("scaled down: namespace, credential and Node removed in %v", time.Since(began).Round(time.Millisecond))
}

// forwarder forwards the connections it accepts to the apiserver.
type forwarder struct {
	conns atomic.Int64
}

// forwardWhenUp listens on addr once link exists (the netns provider
// creates its bridge when tide kube builds the pool) and forwards every
// connection to target, until the test ends.
func forwardWhenUp(t *testing.T, link, addr, target string) *forwarder {
	t.Helper()
	f := &forwarder{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ln net.Listener
	open := map[net.Conn]bool{} // closed when the test ends: a machine still up must not hold the teardown
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if _, err := os.Stat("/sys/class/net/" + link); err == nil {
				if l, err := net.Listen("tcp", addr); err == nil {
					mu.Lock()
					ln = l
					mu.Unlock()
					break
				}
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			mu.Lock()
			open[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { mu.Lock(); delete(open, c); mu.Unlock(); c.Close() }()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c); u.Close() }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	t.Cleanup(func() {
		close(done)
		mu.Lock()
		if ln != nil {
			ln.Close()
		}
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return f
}

// removeNetns deletes every namespace and link whose name starts with
// prefix (what a failed test may leave).
func removeNetns(t *testing.T, prefix string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
				if out, err := exec.Command("ip", "netns", "delete", f[0]).CombinedOutput(); err != nil {
					t.Errorf("ip netns delete %s: %v %s", f[0], err, out)
				} else {
					t.Logf("removed namespace %s", f[0])
				}
			}
		}
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, d := range links {
		if strings.HasPrefix(d.Name(), prefix) {
			if out, err := exec.Command("ip", "link", "delete", d.Name()).CombinedOutput(); err != nil {
				t.Errorf("ip link delete %s: %v %s", d.Name(), err, out)
			} else {
				t.Logf("removed link %s", d.Name())
			}
		}
	}
}

// stalePrefix matches the prefix of the kubelet tests' machines (tq and
// the low 16 bits of the test process's pid, 4 hex digits). Only tq: other
// packages' tests name their namespaces tk<digits>.
var stalePrefix = regexp.MustCompile(`^(tq[0-9a-f]{4})(-|br|$)`)

// sweepStaleMachines removes what a killed run of this package left on
// the host (a panic or go test -timeout skips every cleanup): the
// namespaces, links, cgroups, processes and /run/tide-kubelet directories
// of a prefix whose test process is gone, i.e. no operator.test process
// runs whose pid has those low 16 bits. A concurrent run of the package
// keeps its own. Then, when no kubelet machine of any run is left, what
// their kubelets left on the host: the machines' roots, log links,
// containerd shim sockets and the fixed host paths.
func sweepStaleMachines(t *testing.T) {
	t.Helper()
	prefixes := map[string]bool{}
	note := func(name string) {
		if m := stalePrefix.FindStringSubmatch(name); m != nil {
			prefixes[m[1]] = true
		}
	}
	for _, dir := range []string{"/run/netns", "/sys/class/net", kubelet.RunDir} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			note(e.Name())
		}
	}
	pts, _ := cgroups.Mounted()
	for _, pt := range pts {
		ents, _ := os.ReadDir(pt)
		for _, e := range ents {
			note(e.Name())
		}
	}
	live := map[string]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		if len(prefixes) == 0 {
			break
		}
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + d.Name() + "/comm"); err == nil && strings.TrimSpace(string(comm)) == filepath.Base(os.Args[0]) {
			live[fmt.Sprintf("%04x", pid&0xffff)] = true
		}
	}
	for p := range prefixes {
		if live[p[2:]] {
			continue
		}
		t.Logf("removing the machines of %s, whose test process is gone", p)
		removeKubeletMachines(t, p)
		runs, _ := os.ReadDir(kubelet.RunDir)
		for _, e := range runs {
			if strings.HasPrefix(e.Name(), p+"-") {
				if err := os.RemoveAll(filepath.Join(kubelet.RunDir, e.Name())); err != nil {
					t.Error(err)
				}
			}
		}
	}
	// The host paths their kubelets made, when no other run's machines
	// are left to use them: their roots (/tmp/tk<n>, which no process
	// names any more), the pods' log links into them, the sockets of
	// their containerd shims (when no containerd runs on the host at
	// all), then each path when empty.
	if nss, _ := os.ReadDir("/run/netns"); slices.ContainsFunc(nss, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "tq") }) {
		return
	}
	cmdlines := ""
	procs, _ = os.ReadDir("/proc")
	containerd := false
	for _, d := range procs {
		if _, err := strconv.Atoi(d.Name()); err == nil {
			b, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline")
			cmdlines += string(b) + "\n"
			comm, _ := os.ReadFile("/proc/" + d.Name() + "/comm")
			containerd = containerd || strings.HasPrefix(string(comm), "containerd")
		}
	}
	roots, _ := filepath.Glob(filepath.Join(os.TempDir(), "tk*"))
	for _, r := range roots {
		m, _ := filepath.Glob(filepath.Join(r, "*", "local", "machines"))
		if ents, _ := os.ReadDir(r); len(ents) > 0 && len(m) == 0 || strings.Contains(cmdlines, r+"/") {
			continue // not a machines' root (empty, or with machines), or in use
		}
		if err := os.RemoveAll(r); err != nil {
			t.Error(err)
			continue
		}
		t.Logf("removed %s, the machines' root of a killed run", r)
	}
	links, _ := os.ReadDir("/var/log/containers")
	for _, l := range links {
		p := filepath.Join("/var/log/containers", l.Name())
		if _, err := os.Stat(p); os.IsNotExist(err) { // dangling: its root is gone
			_ = os.Remove(p)
		}
	}
	if !containerd {
		socks, _ := os.ReadDir("/run/containerd/s")
		for _, s := range socks {
			_ = os.Remove(filepath.Join("/run/containerd/s", s.Name()))
		}
	}
	for _, p := range hostPaths {
		if err := os.Remove(p); err == nil {
			t.Logf("removed %s, left by a killed run", p)
		}
	}
}
