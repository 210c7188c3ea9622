package poolspec

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	s, err := Parse("p", []byte(`{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"offerings":[{"type":"g8","gpus":8,"price":1}],
		"node_labels":{"a":"b"},"node_taints":[{"key":"z","effect":"NoSchedule"},{"key":"a","effect":"NoSchedule"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.Name != "p" || s.Labels[PoolLabel] != "p" || s.Labels["a"] != "b" || len(s.Taints) != 2 || s.Taints[0].Key != "a" {
		t.Fatalf("Parse = %+v", s)
	}
	for in, want := range map[string]string{
		`[]`:                                    "spec:",
		`{"selector":{"a":"b"}}`:                "spec.selector",
		`{"node_labels":{"a b":"c"}}`:           "spec.node_labels",
		`{"node_taints":[{"key":"k"}]}`:         "spec.node_taints[0].effect",
		`{"node_labels":{"tide.dev/pool":"q"}}`: "is set by tide",
	} {
		if in != `[]` {
			in = `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"offerings":[{"type":"g8","gpus":8,"price":1}],` + in[1:]
		}
		if _, err := Parse("p", []byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

// FuzzParse: any spec under any name never panics, and an accepted pool
// carries its name (as its config name and its pool label).
func FuzzParse(f *testing.F) {
	f.Add("p", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"offerings":[{"type":"g8","gpus":8,"price":1}]}`)
	f.Add("x", `{"node_labels":{"a":"b"},"node_taints":[{"key":"k","effect":"NoSchedule"}]}`)
	f.Fuzz(func(t *testing.T, name, spec string) {
		p, err := Parse(name, []byte(spec))
		if err != nil {
			return
		}
		if p.Labels[PoolLabel] != name || p.Config.Name != name {
			t.Fatalf("accepted pool %q lacks its name: %+v", name, p)
		}
	})
}

// TestNodeJoin: spec.node_join is read and checked; kubelet settings need
// mode kubelet.
func TestNodeJoin(t *testing.T) {
	base := `{"nodes":{"min":0,"max":2},"provider":{"type":"netns"},"offerings":[{"type":"a","cpu":"1"}],"node_join":%s}`
	s, err := Parse("p", []byte(fmt.Sprintf(base, `{"mode":"kubelet","kubelet":"/k","images":["/i.tar"],"pod_subnet":"10.9.0.0/16","token_ttl":"5m"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Join.Mode != JoinKubelet || s.Join.Kubelet != "/k" || s.Join.TokenLifetime() != 5*time.Minute {
		t.Errorf("join = %+v", s.Join)
	}
	if s, err := Parse("p", []byte(`{"nodes":{"min":0,"max":2},"provider":{"type":"netns"},"offerings":[{"type":"a","cpu":"1"}]}`)); err != nil ||
		s.Join.Mode != "" || s.Join.TokenLifetime() != 15*time.Minute {
		t.Errorf("no node_join: %+v, %v", s.Join, err)
	}
	for _, bad := range []struct{ join, field string }{
		{`{"mode":"kubeadm"}`, "spec.node_join.mode"},
		{`{"mode":"agent","kubelet":"/k"}`, "spec.node_join: only mode kubelet"},
		{`{"mode":"kubelet","pod_subnet":"10.9.0.0/24"}`, "spec.node_join.pod_subnet"},
		{`{"mode":"kubelet","token_ttl":"48h"}`, "spec.node_join.token_ttl"},
		{`{"mode":"kubelet","images":["rel.tar"]}`, "spec.node_join.images[0]"},
		{`{"mode":"kubelet","kubeadm":true}`, "unknown field"},
		{`{"mode":"kubelet","user_data":"kubeadm"}`, "spec.node_join.user_data: kubeadm is for machines that boot from user data (aws), not netns"},
		{`{"mode":"kubelet","user_data":"eks"}`, "spec.node_join.user_data"},
	} {
		_, err := Parse("p", []byte(fmt.Sprintf(base, bad.join)))
		if err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("node_join %s: err %v, want one naming %s", bad.join, err, bad.field)
		}
	}
}

// TestNodeJoinEKS: user_data eks on an aws pool in kubelet mode takes
// node_join.eks (cluster, endpoint, service CIDR, the CA base64-encoded as
// describe-cluster gives it); each missing or malformed setting, a kubelet
// machine setting nodeadm does not take, a token lifetime (no token is
// minted) and eks without user_data eks are refused naming the field.
func TestNodeJoinEKS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	ca := base64.StdEncoding.EncodeToString(caPEM)
	base := `{"nodes":{"min":0,"max":2},"provider":{"type":"%s"},"offerings":[{"type":"m5.large","cpu":"2"}],"node_join":%s}`
	good := `{"mode":"kubelet","user_data":"eks","eks":{"cluster":"prod-1","api_server_endpoint":"https://ABC.gr7.us-east-1.eks.amazonaws.com",
	  "certificate_authority":"` + ca + `","service_cidr":"10.100.0.0/16"}}`
	s, err := Parse("p", []byte(fmt.Sprintf(base, "aws", good)))
	if err != nil {
		t.Fatal(err)
	}
	if e := s.Join.EKS; s.Join.UserData != UserDataEKS || e == nil || e.Cluster != "prod-1" || e.ServiceCIDR != "10.100.0.0/16" ||
		!bytes.Equal(e.CA(), caPEM) {
		t.Errorf("join = %+v eks %+v", s.Join, s.Join.EKS)
	}
	if _, err := Parse("p", []byte(fmt.Sprintf(base, "aws",
		`{"mode":"kubelet","user_data":"eks","eks":{"cluster":"c","api_server_endpoint":"https://h:443","service_cidr":"fd00::/108"}}`))); err != nil {
		t.Errorf("without a CA, an IPv6 service CIDR: %v", err)
	}
	eks := func(fields string) string {
		return `{"mode":"kubelet","user_data":"eks","eks":{` + fields + `}}`
	}
	const ok = `"cluster":"c","api_server_endpoint":"https://h","service_cidr":"10.100.0.0/16"`
	for _, bad := range []struct{ typ, join, want string }{
		{"netns", eks(ok), "spec.node_join.user_data: eks is for machines that boot from user data (aws), not netns"},
		{"aws", `{"mode":"kubelet","user_data":"eks"}`, "spec.node_join.eks: required with user_data eks"},
		{"aws", `{"mode":"agent","eks":{"cluster":"c"}}`, "spec.node_join: only mode kubelet"},
		{"aws", `{"mode":"kubelet","eks":{` + ok + `}}`, "spec.node_join.eks: only user_data eks takes it"},
		{"aws", `{"mode":"kubelet","user_data":"kubeadm","eks":{` + ok + `}}`, "spec.node_join.eks: only user_data eks takes it"},
		{"aws", eks(`"api_server_endpoint":"https://h","service_cidr":"10.100.0.0/16"`), "spec.node_join.eks.cluster: required"},
		{"aws", eks(`"cluster":"-x","api_server_endpoint":"https://h","service_cidr":"10.100.0.0/16"`), "spec.node_join.eks.cluster: \"-x\" is not an EKS cluster name"},
		{"aws", eks(`"cluster":"c","service_cidr":"10.100.0.0/16"`), "spec.node_join.eks.api_server_endpoint: required"},
		{"aws", eks(`"cluster":"c","api_server_endpoint":"http://h","service_cidr":"10.100.0.0/16"`), "spec.node_join.eks.api_server_endpoint: \"http://h\": want https://host[:port]"},
		{"aws", eks(`"cluster":"c","api_server_endpoint":"https://h"`), "spec.node_join.eks.service_cidr: required"},
		{"aws", eks(`"cluster":"c","api_server_endpoint":"https://h","service_cidr":"10.100.0.1/16"`), "spec.node_join.eks.service_cidr: \"10.100.0.1/16\""},
		{"aws", eks(ok + `,"certificate_authority":"not base64!"`), "spec.node_join.eks.certificate_authority: not base64"},
		{"aws", eks(ok + `,"certificate_authority":"` + base64.StdEncoding.EncodeToString([]byte("hello")) + `"`), "spec.node_join.eks.certificate_authority: no PEM certificate"},
		{"aws", eks(ok + `,"region":"us-east-1"`), "unknown field"},
		{"aws", `{"mode":"kubelet","user_data":"eks","kubelet":"/k","eks":{` + ok + `}}`, "spec.node_join.kubelet: not used with user_data eks"},
		{"aws", `{"mode":"kubelet","user_data":"eks","images":["/i.tar"],"eks":{` + ok + `}}`, "spec.node_join.images: not used with user_data eks"},
		{"aws", `{"mode":"kubelet","user_data":"eks","token_ttl":"5m","eks":{` + ok + `}}`, "spec.node_join.token_ttl: not used with user_data eks (an EKS node authenticates with its instance role"},
		{"aws", `{"mode":"kubelet","user_data":"nodeadm"}`, `spec.node_join.user_data: "nodeadm" (want tide, kubeadm or eks)`},
	} {
		_, err := Parse("p", []byte(fmt.Sprintf(base, bad.typ, bad.join)))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s node_join %s: err %v, want one saying %s", bad.typ, bad.join, err, bad.want)
		}
	}
}

// TestKubeletLabels: a kubelet pool's node labels of the kubernetes.io and
// k8s.io namespaces the kubelet would refuse (--node-labels) are refused
// naming the key; the well-known ones, those under node.kubernetes.io/ and
// kubelet.kubernetes.io/, and other prefixes pass; an agent pool (tide's
// agent sets any label) takes them all.
func TestKubeletLabels(t *testing.T) {
	spec := func(mode, label string) []byte {
		return []byte(`{"nodes":{"min":0,"max":2},"provider":{"type":"netns"},"offerings":[{"type":"a","cpu":"1"}],
		  "node_labels":{"` + label + `":"x"},"node_join":{"mode":"` + mode + `"}}`)
	}
	for _, k := range []string{"node-role.kubernetes.io/worker", "kubernetes.io/role", "example.k8s.io/a", "k8s.io/b", "beta.kubernetes.io/fluentd"} {
		if _, err := Parse("p", spec("kubelet", k)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("spec.node_labels: key %q: a kubelet may not", k)) {
			t.Errorf("kubelet pool, label %s: %v", k, err)
		}
		if _, err := Parse("p", spec("agent", k)); err != nil {
			t.Errorf("agent pool, label %s: %v", k, err)
		}
	}
	for _, k := range []string{"topology.kubernetes.io/zone", "node.kubernetes.io/lifecycle", "x.node.kubernetes.io/y", "kubelet.kubernetes.io/z",
		"kubernetes.io/arch", "example.com/team", "tier", "notkubernetes.io/a"} {
		if _, err := Parse("p", spec("kubelet", k)); err != nil {
			t.Errorf("kubelet pool, label %s: %v", k, err)
		}
	}
}
