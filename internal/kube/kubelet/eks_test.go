package kubelet

import (
	"bytes"
	"encoding/base64"
	"flag"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata")

func testEKSNode(t *testing.T) EKSNode {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join("testdata", "eks-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return EKSNode{Machine: "gpu-0-1", Pool: "gpu", Cluster: "prod-1", Endpoint: "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com",
		CA: ca, ServiceCIDR: "10.100.0.0/16",
		Labels: map[string]string{"tide.dev/pool": "gpu", "tide.dev/machine-id": "gpu-0-1", "tier": "gpu",
			"node.kubernetes.io/instance-type": "g5.xlarge", "topology.kubernetes.io/zone": "us-east-1a"},
		Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}, {Key: "tier", Value: "gpu", Effect: corev1.TaintEffectNoExecute}}}
}

// TestEKSUserData: an EKS node's user data is the MIME multipart document
// AL2023 reads (pinned in testdata/eks-userdata.golden; -update rewrites
// it). Read back with the standard library as nodeadm reads it (net/mail,
// mime/multipart, the part of type application/node.eks.aws) and the
// NodeConfig YAML decoded untyped: node.eks.aws/v1alpha1 NodeConfig,
// spec.cluster's name, apiServerEndpoint, certificateAuthority (base64 of
// the CA's PEM) and cidr, and the kubelet flags carrying every label (the
// machine label among them) and both taints. ParseEKSUserData reads the
// same back.
func TestEKSUserData(t *testing.T) {
	n := testEKSNode(t)
	ud, err := EKSUserData(n)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "eks-userdata.golden")
	if *update {
		if err := os.WriteFile(golden, ud, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ud, want) {
		t.Errorf("user data differs from %s (go test -run TestEKSUserData -update rewrites it):\n%s", golden, ud)
	}

	msg, err := mail.ReadMessage(bytes.NewReader(ud))
	if err != nil {
		t.Fatal(err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/mixed" || msg.Header.Get("MIME-Version") != "1.0" {
		t.Fatalf("header: %v %s %v", msg.Header, mt, err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	var docs [][]byte
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.Header.Get("Content-Type") != "application/node.eks.aws" {
			t.Errorf("a part of type %q", p.Header.Get("Content-Type"))
			continue
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	if len(docs) != 1 {
		t.Fatalf("%d NodeConfig parts, want 1", len(docs))
	}
	var doc map[string]any
	if err := yaml.Unmarshal(docs[0], &doc); err != nil {
		t.Fatalf("NodeConfig: %v\n%s", err, docs[0])
	}
	spec, _ := doc["spec"].(map[string]any)
	cluster, _ := spec["cluster"].(map[string]any)
	kubelet, _ := spec["kubelet"].(map[string]any)
	var flags []string
	for _, f := range kubelet["flags"].([]any) {
		flags = append(flags, f.(string))
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"apiVersion", doc["apiVersion"], "node.eks.aws/v1alpha1"},
		{"kind", doc["kind"], "NodeConfig"},
		{"spec.cluster.name", cluster["name"], "prod-1"},
		{"spec.cluster.apiServerEndpoint", cluster["apiServerEndpoint"], n.Endpoint},
		{"spec.cluster.certificateAuthority", cluster["certificateAuthority"], base64.StdEncoding.EncodeToString(n.CA)},
		{"spec.cluster.cidr", cluster["cidr"], "10.100.0.0/16"},
		{"spec.kubelet.flags", strings.Join(flags, " "), "--node-labels=node.kubernetes.io/instance-type=g5.xlarge,tide.dev/machine-id=gpu-0-1," +
			"tide.dev/pool=gpu,tier=gpu,topology.kubernetes.io/zone=us-east-1a --register-with-taints=nvidia.com/gpu:NoSchedule,tier=gpu:NoExecute"},
		{"spec keys", strings.Join(slices.Sorted(mapsKeys(spec)), ","), "cluster,kubelet"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}

	c, err := ParseEKSUserData(ud)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Flag("node-labels"); !strings.Contains(l, "tide.dev/machine-id=gpu-0-1") || !bytes.Equal(c.Spec.Cluster.CertificateAuthority, n.CA) {
		t.Errorf("ParseEKSUserData: %+v", c)
	}
}

func mapsKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestEKSUserDataRefused: user data nodeadm would refuse is not rendered
// (each missing cluster setting named), and ParseEKSUserData refuses what
// is not one NodeConfig in MIME multipart.
func TestEKSUserDataRefused(t *testing.T) {
	for _, c := range []struct {
		edit func(*EKSNode)
		want string
	}{
		{func(n *EKSNode) { n.Cluster = "" }, "spec.cluster.name"},
		{func(n *EKSNode) { n.Endpoint = "10.0.0.1:443" }, "spec.cluster.apiServerEndpoint"},
		{func(n *EKSNode) { n.CA = nil }, "spec.cluster.certificateAuthority: empty"},
		{func(n *EKSNode) { n.CA = []byte("junk") }, "spec.cluster.certificateAuthority: CA: no PEM"},
		{func(n *EKSNode) { n.ServiceCIDR = "" }, "spec.cluster.cidr"},
	} {
		n := testEKSNode(t)
		c.edit(&n)
		if _, err := EKSUserData(n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err %v, want one naming %s", err, c.want)
		}
	}
	good, err := EKSUserData(testEKSNode(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"a script":      "#!/bin/sh\necho hi\n",
		"no NodeConfig": strings.Replace(string(good), "application/node.eks.aws", "text/x-shellscript", 1),
		"two NodeConfigs": strings.Replace(string(good), "\n--tide-eks-nodeconfig--", "\n--tide-eks-nodeconfig\nContent-Type: application/node.eks.aws\n\n"+
			string(good[strings.Index(string(good), "---\n"):strings.LastIndex(string(good), "\n--tide-eks-nodeconfig--")])+"\n--tide-eks-nodeconfig--", 1),
		"unknown field": strings.Replace(string(good), "  cluster:\n", "  clusterx: 1\n  cluster:\n", 1),
	} {
		if _, err := ParseEKSUserData([]byte(data)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
