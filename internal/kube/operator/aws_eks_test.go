package operator

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kfake "k8s.io/client-go/kubernetes/fake"

	"github.com/tide-project/tide/internal/kube/kubelet"
	"github.com/tide-project/tide/internal/kube/nodepool"
	"github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/sdk/provider"
)

// TestAWSEKSUserData: an aws NodePool in kubelet mode with
// node_join.user_data eks. Each instance moto launches carries MIME
// multipart user data whose NodeConfig (nodeadm's) names the pool's EKS
// cluster, endpoint, CA (the pool's) and service CIDR, and registers the
// Node with the pool's labels, its offering's, the machine label and the
// pool's taint. No credential is minted (no bootstrap token Secret, no
// ServiceAccount, no binding): the instance role authenticates an EKS node.
// The provider maps the providerID nodeadm gives the Node,
// aws:///<zone>/<instance id>, back to the machine, so a Node named after
// the instance's private DNS name is the machine's; Delete terminates the
// instance and leaves nothing behind.
func TestAWSEKSUserData(t *testing.T) {
	moto := awstest.StartMoto(t)
	awstest.Env(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	kc := kfake.NewClientset()
	ca := testCA(t)
	o := fakeOperator(t, kc, nil)
	const endpoint = "https://0123ABCD.gr7.us-east-1.eks.amazonaws.com"
	np, err := nodepool.Parse("eks", []byte(`{"nodes":{"min":0,"max":4},
	  "provider":{"type":"aws","options":{"name":"kube-eks-`+time.Now().Format("150405.000000")+`","endpoint":"`+moto.URL+`",
	    "image_id":"ami-03cf127a","instance_types":["m5.large"],"capacity":["on-demand"],"max_backoff":"20ms"}},
	  "offerings":[{"type":"m5.large","zone":"us-east-1a","cpu":2,"memory":"8Gi","price":0.1}],
	  "node_labels":{"tier":"eks"},"node_taints":[{"key":"dedicated","value":"eks","effect":"NoSchedule"}],
	  "node_join":{"mode":"kubelet","user_data":"eks","eks":{"cluster":"prod-1","api_server_endpoint":"`+endpoint+`",
	    "certificate_authority":"`+base64.StdEncoding.EncodeToString(ca)+`","service_cidr":"10.100.0.0/16"}}}`))
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
	r := &runner{name: "eks", pool: np, joined: map[string]bool{}, nodes: newNodeIndex(func(id string) string { return id }, p)}
	r.nodeName = r.nodes.Name
	j := joining{Provider: p, o: o, r: r, provType: "aws"}

	ac, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ac.BaseEndpoint = awssdk.String(moto.URL)
	ec := ec2.NewFromConfig(ac)
	f := provider.Fence{Controller: "c", Epoch: 1}
	instance := func(id string) types.Instance {
		t.Helper()
		out, err := ec.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
			{Name: awssdk.String("tag:tide:machine-id"), Values: []string{id}}}})
		if err != nil || len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
			t.Fatalf("instances of %s: %+v %v", id, out, err)
		}
		return out.Reservations[0].Instances[0]
	}
	var nodes []*corev1.Node
	for _, id := range []string{"eks-0-1", "eks-1-2"} {
		if _, err := j.Create(ctx, provider.CreateRequest{Fence: f, Pool: "eks", MachineID: id, Offering: "m5.large/us-east-1a/on-demand",
			Bootstrap: []byte("kubernetes")}); err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
		in := instance(id)
		ud := userData(ctx, t, ec, in.InstanceId)
		if !strings.HasPrefix(string(ud), "MIME-Version: 1.0\n") {
			t.Fatalf("user data of %s is not MIME multipart:\n%s", id, ud)
		}
		nc, err := kubelet.ParseEKSUserData(ud)
		if err != nil {
			t.Fatalf("user data of %s: %v\n%s", id, err, ud)
		}
		cl := nc.Spec.Cluster
		labels, _ := nc.Flag("node-labels")
		taints, _ := nc.Flag("register-with-taints")
		if cl.Name != "prod-1" || cl.APIServerEndpoint != endpoint || string(cl.CertificateAuthority) != string(ca) || cl.CIDR != "10.100.0.0/16" ||
			labels != "node.kubernetes.io/instance-type=m5.large,tide.dev/machine-id="+id+",tide.dev/pool=eks,tier=eks,topology.kubernetes.io/zone=us-east-1a" ||
			taints != "dedicated=eks:NoSchedule" {
			t.Errorf("%s: NodeConfig %+v", id, nc)
		}
		// The Node nodeadm would register: named after the private DNS
		// name, the providerID aws:///<zone>/<instance id>; here without
		// the machine label, so only the providerID says whose it is.
		iid := awssdk.ToString(in.InstanceId)
		pid := aws.ProviderIDOf(awssdk.ToString(in.Placement.AvailabilityZone), iid)
		if got, ok := p.(providerResolver).MachineOfProviderID(pid); !ok || got != id {
			t.Errorf("MachineOfProviderID(%s) = %q %v, want %s", pid, got, ok, id)
		}
		name := awssdk.ToString(in.PrivateDnsName)
		if name == "" || name == id {
			t.Fatalf("instance %s: private DNS name %q", iid, name)
		}
		nodes = append(nodes, testNode(name, "eks", pid, nil))
	}
	r.nodes.refresh(nodes)
	for i, id := range []string{"eks-0-1", "eks-1-2"} {
		if got := r.nodeName(id); got != nodes[i].Name {
			t.Errorf("Node of %s: %s, want %s", id, got, nodes[i].Name)
		}
	}
	secrets, _ := kc.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	sas, _ := kc.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{})
	crbs, _ := kc.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if len(secrets.Items)+len(sas.Items)+len(crbs.Items) > 0 {
		t.Errorf("an EKS machine got a credential: %d Secrets, %d ServiceAccounts, %d ClusterRoleBindings",
			len(secrets.Items), len(sas.Items), len(crbs.Items))
	}
	for _, n := range nodes {
		if _, err := kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "eks", MachineID: "eks-0-1"}); err != nil {
		t.Fatalf("Delete eks-0-1: %v", err)
	}
	if st := instance("eks-0-1").State; st == nil || (st.Name != types.InstanceStateNameShuttingDown && st.Name != types.InstanceStateNameTerminated) {
		t.Errorf("eks-0-1's instance is %v after its Delete", st)
	}
	if _, err := kc.CoreV1().Nodes().Get(ctx, nodes[0].Name, metav1.GetOptions{}); err == nil {
		t.Errorf("Node %s of eks-0-1 survived its Delete", nodes[0].Name)
	}
	if _, err := kc.CoreV1().Nodes().Get(ctx, nodes[1].Name, metav1.GetOptions{}); err != nil {
		t.Errorf("Node %s of eks-1-2 went with eks-0-1: %v", nodes[1].Name, err)
	}
	if _, err := j.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "eks", MachineID: "eks-1-2"}); err != nil {
		t.Fatalf("Delete eks-1-2: %v", err)
	}
}
