package kubelet

import (
	"net/netip"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var testPaths = paths{State: "/data/m-1/kubelet", Run: "/run/tide-kubelet/abc"}

// TestContainerdConfig: the settings the recipe found essential are in the
// rendered config, at the places containerd 1.6 reads them.
func TestContainerdConfig(t *testing.T) {
	b, err := containerdConfig(testPaths, "localhost/tide/pause:1", "/usr/lib/cni")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Version int
		Root    string
		State   string
		GRPC    struct{ Address string } `toml:"grpc"`
		Plugins map[string]map[string]any
	}
	if err := toml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	cri := c.Plugins["io.containerd.grpc.v1.cri"]
	runc := cri["containerd"].(map[string]any)["runtimes"].(map[string]any)["runc"].(map[string]any)["options"].(map[string]any)
	cni := cri["cni"].(map[string]any)
	for _, chk := range []struct {
		what      string
		got, want any
	}{
		{"version", c.Version, 2},
		{"root", c.Root, "/data/m-1/kubelet/containerd/root"},
		{"grpc.address", c.GRPC.Address, "/run/tide-kubelet/abc/containerd.sock"},
		{"sandbox_image", cri["sandbox_image"], "localhost/tide/pause:1"},
		{"restrict_oom_score_adj", cri["restrict_oom_score_adj"], true},
		{"netns_mounts_under_state_dir", cri["netns_mounts_under_state_dir"], true},
		{"runc SystemdCgroup", runc["SystemdCgroup"], false},
		{"runc Root", runc["Root"], "/data/m-1/kubelet/runc"},
		{"cni bin_dir", cni["bin_dir"], "/usr/lib/cni"},
		{"cni conf_dir", cni["conf_dir"], "/data/m-1/kubelet/cni"},
	} {
		if chk.got != chk.want {
			t.Errorf("%s = %v, want %v\n%s", chk.what, chk.got, chk.want, b)
		}
	}
}

func TestPodCIDR(t *testing.T) {
	got, err := podCIDR("10.244.0.0/16", netip.MustParseAddr("10.233.7.12"))
	if err != nil || got.String() != "10.244.12.0/24" {
		t.Errorf("podCIDR = %v, %v; want 10.244.12.0/24", got, err)
	}
	for _, bad := range []string{"10.244.0.0/24", "10.244.1.0/16", "fd00::/16", "x"} {
		if _, err := podCIDR(bad, netip.MustParseAddr("10.0.0.2")); err == nil {
			t.Errorf("podCIDR(%q) accepted", bad)
		}
	}
	cni, err := cniConfig(netip.MustParsePrefix("10.244.12.0/24"))
	if err != nil || !strings.Contains(string(cni), `"subnet":"10.244.12.0/24"`) || !strings.Contains(string(cni), `"ipMasq":true`) {
		t.Errorf("cniConfig = %s, %v", cni, err)
	}
}

// TestKubeletConfig: the kubelet settings the recipe needs (cgroupfs under
// the machine's root, no certificate rotation, oomScoreAdj 0, the CA for
// the apiserver's client certificate, the providerID) and the
// systemReserved that shrinks a bigger machine to its offering.
func TestKubeletConfig(t *testing.T) {
	res, err := reserved(map[corev1.ResourceName]string{corev1.ResourceCPU: "1", corev1.ResourceMemory: "2Gi"}, 4000, 8<<30)
	if err != nil {
		t.Fatal(err)
	}
	if c, m := res[corev1.ResourceCPU], res[corev1.ResourceMemory]; c.MilliValue() != 3000 || m.Value() != 6<<30-EvictionMemory {
		t.Errorf("reserved = cpu %s memory %s; want 3 and 6Gi less the eviction threshold", c.String(), m.String())
	}
	if r, _ := reserved(map[corev1.ResourceName]string{corev1.ResourceCPU: "8"}, 4000, 8<<30); len(r) != 0 {
		t.Errorf("a machine smaller than its offering reserves %v", r)
	}
	b, err := kubeletConfig(testPaths, kubeletSettings{NodeIP: netip.MustParseAddr("10.233.7.12"), CgroupRoot: "/tn-m-1",
		CAFile: "/data/ca.crt", ProviderID: "tide://netns/m-1", Reserved: res})
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"kind": "KubeletConfiguration", "cgroupDriver": "cgroupfs", "cgroupRoot": "/tn-m-1",
		"rotateCertificates": false, "oomScoreAdj": float64(0), "failCgroupV1": false, "providerID": "tide://netns/m-1",
		"address": "10.233.7.12", "containerRuntimeEndpoint": "unix:///run/tide-kubelet/abc/containerd.sock"}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %v, want %v", k, c[k], v)
		}
	}
	if x509 := c["authentication"].(map[string]any)["x509"].(map[string]any); x509["clientCAFile"] != "/data/ca.crt" {
		t.Errorf("authentication.x509 = %v", x509)
	}
	if sr := c["systemReserved"].(map[string]any); sr["cpu"] != "3" {
		t.Errorf("systemReserved = %v", sr)
	}
}

func TestBootstrapKubeconfig(t *testing.T) {
	b, err := bootstrapKubeconfig("https://10.0.0.1:6443", []byte("PEM"), false, "abcdef.0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"server: https://10.0.0.1:6443", "certificate-authority-data: UEVN", "token: abcdef.0123456789abcdef"} {
		if !strings.Contains(s, want) {
			t.Errorf("bootstrap kubeconfig lacks %q:\n%s", want, s)
		}
	}
	b, _ = bootstrapKubeconfig("https://10.0.0.1:6443", []byte("PEM"), true, "abcdef.0123456789abcdef")
	if s := string(b); !strings.Contains(s, "insecure-skip-tls-verify: true") || strings.Contains(s, "certificate-authority-data") {
		t.Errorf("insecure bootstrap kubeconfig:\n%s", s)
	}
}

func TestNodeFlags(t *testing.T) {
	if got := nodeLabels(map[string]string{"tier": "k", "tide.dev/pool": "p"}); got != "tide.dev/pool=p,tier=k" {
		t.Errorf("nodeLabels = %q", got)
	}
	got := nodeTaints([]corev1.Taint{{Key: "a", Value: "b", Effect: corev1.TaintEffectNoSchedule}, {Key: "c", Effect: corev1.TaintEffectNoExecute}})
	if got != "a=b:NoSchedule,c:NoExecute" {
		t.Errorf("nodeTaints = %q", got)
	}
}
