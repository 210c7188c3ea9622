// Package kubelet is the machine side of a NodePool whose machines join as
// real kubelet Nodes (spec.node_join.mode kubelet): given the Join tide kube
// minted for the machine, Run starts the machine's own containerd and a
// kubelet as supervised child processes and stops them, with every pod,
// when it ends.
//
// The kubelet joins by TLS bootstrap: its bootstrap kubeconfig carries the
// machine's bootstrap token (a Secret in kube-system tide kube made for this
// machine only, short-lived and deleted with the machine); the
// kube-controller-manager approves and signs its client certificate, and the
// kubelet registers its Node with the pool's labels, taints and providerID.
//
// Several such machines can share one host (the netns provider's machines):
// each has its own containerd (socket, state, runc root and CNI config under
// its data directory), its own cgroup root (Config.CgroupRoot, also set by
// the netns provider through TIDE_MACHINE_CGROUP), and its pods get a /24 of
// the pool's pod subnet chosen by its address. The settings follow
// shared/reference/real-kubelet-nodes.md, which measured them on a machine
// like the test machine: restrict_oom_score_adj (no CAP_SYS_RESOURCE),
// cgroup hierarchies mounted again inside `ip netns exec`'s fresh /sys,
// rotateCertificates false (a kubelet bootstrapping "in background" starts
// its informers anonymous and is Ready only after their backoff), and the
// netns's veth deleted before the netns (the provider's teardown).
//
// The kubelet changes some machine-wide sysctls when it starts
// (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops): on a machine
// of its own that is what it is for; on a shared test host the test saves
// and restores them (SysctlsChanged).
package kubelet

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// SysctlsChanged are the machine-wide sysctls (paths under /proc/sys) a
// kubelet sets when it starts (measured with v1.33): a host that runs
// kubelets only for a while should save them first and write them back
// after the last kubelet is gone.
var SysctlsChanged = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// Defaults of the machine's settings (a field left empty in the Join).
const (
	DefaultSandboxImage = "registry.k8s.io/pause:3.10"
	DefaultPodSubnet    = "10.244.0.0/16"
	// EvictionMemory is the kubelet's hard eviction threshold for memory;
	// it is part of what the Node keeps from its pods.
	EvictionMemory = 100 << 20
)

// paths are where one machine keeps its runtime's and kubelet's files.
type paths struct {
	State string // <data dir>/kubelet: containerd root and state, kubelet root, logs
	Run   string // short directory for unix sockets (108-byte limit)
}

func (p paths) containerdSock() string { return p.Run + "/containerd.sock" }
func (p paths) cniConfDir() string     { return p.State + "/cni" }

// containerdConfig renders the machine's containerd configuration (format
// version 2, containerd 1.6/1.7).
func containerdConfig(p paths, sandboxImage, cniBinDir string) ([]byte, error) {
	cri := map[string]any{
		"sandbox_image": sandboxImage,
		// No CAP_SYS_RESOURCE (a container, a microVM): nothing may lower
		// its oom_score_adj, and the CRI's -998 for every pause container
		// makes runc fail ("can't get final child's PID from pipe").
		// Clamp to containerd's own value instead.
		"restrict_oom_score_adj": true,
		// Pod network namespaces under the state dir, not /run/netns.
		"netns_mounts_under_state_dir": true,
		"stream_server_address":        "127.0.0.1",
		"stream_server_port":           "0",
		"containerd": map[string]any{
			"snapshotter":          "overlayfs",
			"default_runtime_name": "runc",
			"runtimes": map[string]any{"runc": map[string]any{
				"runtime_type": "io.containerd.runc.v2",
				"options": map[string]any{
					"SystemdCgroup": false,
					"Root":          p.State + "/runc", // not the host-wide /run/containerd/runc
				},
			}},
		},
		"cni": map[string]any{"bin_dir": cniBinDir, "conf_dir": p.cniConfDir()},
	}
	cfg := map[string]any{
		"version": 2,
		"root":    p.State + "/containerd/root",
		"state":   p.State + "/containerd/state",
		"disabled_plugins": []string{"io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
			"io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"},
		"grpc": map[string]any{"address": p.containerdSock()},
		"plugins": map[string]any{
			"io.containerd.internal.v1.opt": map[string]any{"path": p.State + "/containerd/opt"},
			"io.containerd.grpc.v1.cri":     cri,
		},
	}
	return toml.Marshal(cfg)
}

// podCIDR returns the machine's pods' /24: the third octet of the pool's
// /16 is the last octet of the machine's address.
func podCIDR(subnet string, node netip.Addr) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() != 16 || p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("pod subnet %q: want an IPv4 /16", subnet)
	}
	if !node.Is4() {
		return netip.Prefix{}, fmt.Errorf("machine address %s: want IPv4", node)
	}
	a := p.Addr().As4()
	a[2] = node.As4()[3]
	return netip.PrefixFrom(netip.AddrFrom4(a), 24), nil
}

// cniConfig renders the CNI network of the machine's pods: a bridge inside
// the machine with host-local addresses from cidr, masqueraded out of it.
func cniConfig(cidr netip.Prefix) ([]byte, error) {
	return jsonMarshal(map[string]any{
		"cniVersion": "0.4.0",
		"name":       "tide",
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": cidr.String()}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}}}},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	})
}

func jsonMarshal(v any) ([]byte, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	return yaml.YAMLToJSON(b)
}

// bootstrapKubeconfig renders the kubeconfig the kubelet bootstraps with:
// the apiserver, its CA (or no verification) and the bootstrap token.
func bootstrapKubeconfig(server string, ca []byte, insecure bool, token string) ([]byte, error) {
	cluster := map[string]any{"server": server}
	if insecure {
		cluster["insecure-skip-tls-verify"] = true
	} else if len(ca) > 0 {
		cluster["certificate-authority-data"] = ca // []byte: base64 in YAML, as kubeconfig wants
	}
	return yaml.Marshal(map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"clusters":        []any{map[string]any{"name": "tide", "cluster": cluster}},
		"users":           []any{map[string]any{"name": "tls-bootstrap-token-user", "user": map[string]any{"token": token}}},
		"contexts":        []any{map[string]any{"name": "tide", "context": map[string]string{"cluster": "tide", "user": "tls-bootstrap-token-user"}}},
		"current-context": "tide",
	})
}

// kubeletSettings are the inputs of kubeletConfig.
type kubeletSettings struct {
	NodeIP        netip.Addr
	CgroupRoot    string // absolute: /tide-<node>
	CAFile        string // the cluster CA the kubelet authenticates the apiserver's client cert with ("": x509 off)
	ProviderID    string
	Reserved      corev1.ResourceList // systemReserved: what a bigger machine keeps from its Node
	ClusterDNS    []string
	ClusterDomain string
}

// kubeletConfig renders the KubeletConfiguration (v1beta1).
func kubeletConfig(p paths, s kubeletSettings) ([]byte, error) {
	authn := map[string]any{"anonymous": map[string]bool{"enabled": false}, "webhook": map[string]bool{"enabled": true}}
	if s.CAFile != "" {
		authn["x509"] = map[string]string{"clientCAFile": s.CAFile}
	}
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"address":                  s.NodeIP.String(),
		"port":                     10250,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              0,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               s.CgroupRoot,
		"failSwapOn":               false,
		"failCgroupV1":             false,
		"containerRuntimeEndpoint": "unix://" + p.containerdSock(),
		"podLogsDir":               p.State + "/pod-logs",
		"providerID":               s.ProviderID,
		// The client certificate first, then the API clients: with
		// rotation on, the kubelet bootstraps in the background, its
		// informers start anonymous, and their backoff delayed Ready by up
		// to 30 s in the measurements.
		"rotateCertificates": false,
		"oomScoreAdj":        0,
		"authentication":     authn,
		"authorization":      map[string]string{"mode": "Webhook"},
		"clusterDomain":      cmpOr(s.ClusterDomain, "cluster.local"),
		"resolvConf":         "/etc/resolv.conf",
		// Low thresholds: a fuller shared disk must not put every Node
		// under DiskPressure.
		"evictionHard": map[string]string{"memory.available": strconv.Itoa(EvictionMemory>>20) + "Mi",
			"nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
	}
	if len(s.ClusterDNS) > 0 {
		cfg["clusterDNS"] = s.ClusterDNS
	}
	if len(s.Reserved) > 0 {
		r := map[string]string{}
		for k, v := range s.Reserved {
			r[string(k)] = v.String()
		}
		cfg["systemReserved"] = r
	}
	return yaml.Marshal(cfg)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// nodeLabels renders --node-labels (sorted, so the flag is stable).
func nodeLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + labels[k]
	}
	return strings.Join(out, ",")
}

// nodeTaints renders --register-with-taints.
func nodeTaints(taints []corev1.Taint) string {
	out := make([]string, len(taints))
	for i, t := range taints {
		out[i] = t.Key
		if t.Value != "" {
			out[i] += "=" + t.Value
		}
		out[i] += ":" + string(t.Effect)
	}
	return strings.Join(out, ",")
}

// reserved returns the kubelet's systemReserved on a machine with hostMilliCPU
// and hostMemory when its Node should offer capacity (the offering): the
// rest of the CPU and memory, less the memory eviction threshold (which the
// kubelet keeps from its pods as well). A resource the machine has no more
// of than the offering reserves nothing; resources other than CPU and
// memory are the machine's as the kubelet finds them.
func reserved(capacity map[corev1.ResourceName]string, hostMilliCPU, hostMemory int64) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	if v, ok := capacity[corev1.ResourceCPU]; ok {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("capacity cpu: %w", err)
		}
		if rest := hostMilliCPU - q.MilliValue(); rest > 0 {
			out[corev1.ResourceCPU] = *resource.NewMilliQuantity(rest, resource.DecimalSI)
		}
	}
	if v, ok := capacity[corev1.ResourceMemory]; ok {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("capacity memory: %w", err)
		}
		if rest := hostMemory - q.Value() - EvictionMemory; rest > 0 {
			out[corev1.ResourceMemory] = *resource.NewQuantity(rest, resource.BinarySI)
		}
	}
	return out, nil
}
