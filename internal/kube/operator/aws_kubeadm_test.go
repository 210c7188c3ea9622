package operator

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kfake "k8s.io/client-go/kubernetes/fake"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	"github.com/tide-project/tide/internal/kube/kubelet"
	"github.com/tide-project/tide/internal/kube/nodepool"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/sdk/provider"
)

// TestAWSKubeadmUserData: an aws NodePool in kubelet mode with
// node_join.user_data kubeadm. Each instance moto launches carries a boot
// script that writes a kubeadm JoinConfiguration with that machine's own
// bootstrap token (a Secret in kube-system that may sign cluster-info, as
// kubeadm's discovery needs), the apiserver, the hash of the cluster CA,
// the Node's name, the pool's labels and taint and providerID
// tide://aws/<id>, then runs kubeadm join. Deleting a machine deletes its
// token, not the other's. Moto runs nothing, so no Node registers here.
func TestAWSKubeadmUserData(t *testing.T) {
	moto := awstest.StartMoto(t)
	awstest.Env(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	kc := kfake.NewClientset()
	for _, b := range BootstrapBindings {
		if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Role},
			RoleRef:  rbacv1.RoleRef{Kind: "ClusterRole", Name: b.Role},
			Subjects: []rbacv1.Subject{{Kind: "Group", Name: b.Group}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ca := testCA(t)
	o := fakeOperator(t, kc, ca)
	np, err := nodepool.Parse("ec2", []byte(`{"nodes":{"min":0,"max":4},
	  "provider":{"type":"aws","options":{"name":"kube-kubeadm-`+time.Now().Format("150405.000000")+`","endpoint":"`+moto.URL+`",
	    "image_id":"ami-03cf127a","instance_types":["m5.large"],"capacity":["on-demand"],"max_backoff":"20ms"}},
	  "offerings":[{"type":"m5.large","zone":"us-east-1a","cpu":2,"memory":"8Gi","price":0.1}],
	  "node_labels":{"tier":"ec2"},"node_taints":[{"key":"gpu","value":"no","effect":"NoSchedule"}],
	  "node_join":{"mode":"kubelet","user_data":"kubeadm"}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := build.New(np.Config, o.buildEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, err := b()
	if err != nil {
		t.Fatal(err)
	}
	defer p.(interface{ Close() error }).Close()
	j := joining{Provider: p, o: o, r: &runner{name: "ec2", pool: np, joined: map[string]bool{}}, provType: "aws"}

	ac, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ac.BaseEndpoint = awssdk.String(moto.URL)
	ec := ec2.NewFromConfig(ac)
	f := provider.Fence{Controller: "c", Epoch: 1}
	hash, err := kubelet.CACertHash(ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"k-1", "k-2"} {
		if _, err := j.Create(ctx, provider.CreateRequest{Fence: f, Pool: "ec2", MachineID: id, Offering: "m5.large/us-east-1a/on-demand",
			Bootstrap: []byte("kubernetes")}); err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
		out, err := ec.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
			{Name: awssdk.String("tag:tide:machine-id"), Values: []string{id}},
			{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running"}}}})
		if err != nil || len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
			t.Fatalf("instances of %s: %+v %v", id, out, err)
		}
		script := userData(ctx, t, ec, out.Reservations[0].Instances[0].InstanceId)
		s := string(script)
		start, end := strings.Index(s, "<<'TIDE_JOIN'\n"), strings.LastIndex(s, "TIDE_JOIN\nexec kubeadm join --config "+kubelet.KubeadmJoinPath)
		if !strings.HasPrefix(s, "#!/bin/sh\n") || start < 0 || end < start {
			t.Fatalf("user data of %s is not the kubeadm join script:\n%s", id, s)
		}
		var jc struct {
			Kind      string
			Discovery struct {
				BootstrapToken struct {
					APIServerEndpoint string   `json:"apiServerEndpoint"`
					Token             string   `json:"token"`
					CACertHashes      []string `json:"caCertHashes"`
				} `json:"bootstrapToken"`
				TLSBootstrapToken string `json:"tlsBootstrapToken"`
			}
			NodeRegistration struct {
				Name             string
				Taints           []corev1.Taint
				KubeletExtraArgs []struct{ Name, Value string } `json:"kubeletExtraArgs"`
			} `json:"nodeRegistration"`
		}
		if err := yaml.Unmarshal([]byte(s[start+len("<<'TIDE_JOIN'\n"):end]), &jc); err != nil {
			t.Fatalf("JoinConfiguration of %s: %v\n%s", id, err, s)
		}
		bt := jc.Discovery.BootstrapToken
		tokenID, _, _ := strings.Cut(bt.Token, ".")
		sec, err := kc.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+tokenID, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: no Secret of its token %s: %v", id, bt.Token, err)
		}
		args := map[string]string{}
		for _, a := range jc.NodeRegistration.KubeletExtraArgs {
			args[a.Name] = a.Value
		}
		if jc.Kind != "JoinConfiguration" || bt.APIServerEndpoint != "10.0.0.1:6443" || len(bt.CACertHashes) != 1 || bt.CACertHashes[0] != hash ||
			jc.Discovery.TLSBootstrapToken != bt.Token || bt.Token != sec.StringData["token-id"]+"."+sec.StringData["token-secret"] ||
			sec.Type != corev1.SecretTypeBootstrapToken || sec.StringData["usage-bootstrap-signing"] != "true" || sec.Labels[MachineLabel] != id ||
			jc.NodeRegistration.Name != id || args["provider-id"] != "tide://aws/"+id || args["node-labels"] != "node.kubernetes.io/instance-type=m5.large,tide.dev/machine-id="+id+",tide.dev/pool=ec2,tier=ec2,topology.kubernetes.io/zone=us-east-1a" ||
			len(jc.NodeRegistration.Taints) != 1 || jc.NodeRegistration.Taints[0].Key != "gpu" {
			t.Errorf("%s: JoinConfiguration %+v with its token's Secret %+v", id, jc, sec)
		}
	}
	if _, err := j.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "ec2", MachineID: "k-1"}); err != nil {
		t.Fatalf("Delete k-1: %v", err)
	}
	if _, err := kc.CoreV1().Secrets("kube-system").Get(ctx, bootstrapSecretName("ec2", "k-1"), metav1.GetOptions{}); err == nil {
		t.Error("k-1's bootstrap token survived its Delete")
	}
	if _, err := kc.CoreV1().Secrets("kube-system").Get(ctx, bootstrapSecretName("ec2", "k-2"), metav1.GetOptions{}); err != nil {
		t.Errorf("k-2's bootstrap token went with k-1: %v", err)
	}
}

// fakeOperator returns an operator on the fake clientset kc (namespace
// tide-system, real time) whose machines join https://10.0.0.1:6443 with
// the cluster CA ca (nil: none given).
func fakeOperator(t *testing.T, kc *kfake.Clientset, ca []byte) *Operator {
	t.Helper()
	o, err := New(Config{Client: crfake.NewClientBuilder().Build(), API: kubeapi.NewClientset(kc), Namespace: "tide-system",
		Kube: kc, Join: NodeJoin{Server: "https://10.0.0.1:6443", CA: ca}, Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// userData returns the user data moto keeps for the instance id, decoded.
func userData(ctx context.Context, t *testing.T, ec *ec2.Client, id *string) []byte {
	t.Helper()
	attr, err := ec.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{
		InstanceId: id, Attribute: types.InstanceAttributeNameUserData})
	if err != nil || attr.UserData == nil {
		t.Fatalf("user data of %s: %v", awssdk.ToString(id), err)
	}
	ud, err := base64.StdEncoding.DecodeString(awssdk.ToString(attr.UserData.Value))
	if err != nil {
		t.Fatal(err)
	}
	return ud
}

// testCA returns a self-signed CA certificate (PEM).
func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
