package operator

import (
	"context"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tide-project/tide/internal/kube/nodeagent"
	"github.com/tide-project/tide/internal/kube/nodepool"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/sdk/provider"
)

// TestAWSUserDataIsTheMachinesJoin: an aws NodePool's provider, built by
// the construction tide head uses (internal/provider/build) and wrapped by
// tide kube's joining, joins at Create (JoinsAtCreate): the user data moto
// stores for each instance is cloud-init whose blob is a join document for
// that machine only (its Node name, providerID tide://aws/<id>, the pool's
// labels, a token of its own ServiceAccount), which `tide worker
// --bootstrap` turns into the Node agent; Configure mints nothing more;
// Delete revokes the machine's ServiceAccount and bindings (the other
// machine's stay). Moto runs nothing, so no Node registers here.
func TestAWSUserDataIsTheMachinesJoin(t *testing.T) {
	moto := awstest.StartMoto(t)
	awstest.Env(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	kc := kfake.NewClientset()
	kc.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenRequest).Name
		if name == "" {
			name = a.(k8stesting.CreateActionImpl).Name
		}
		return true, &authv1.TokenRequest{Status: authv1.TokenRequestStatus{Token: "token-of-" + name}}, nil
	})
	o := fakeOperator(t, kc, nil)
	np, err := nodepool.Parse("ec2", []byte(`{"nodes":{"min":0,"max":4},
	  "provider":{"type":"aws","options":{"name":"kube-join-`+time.Now().Format("150405.000000")+`","endpoint":"`+moto.URL+`",
	    "image_id":"ami-03cf127a","instance_types":["m5.large"],"capacity":["on-demand"],"max_backoff":"20ms",
	    "tide_binary":"/usr/local/bin/tide"}},
	  "offerings":[{"type":"m5.large","zone":"us-east-1a","cpu":2,"memory":"8Gi","price":0.1}],
	  "node_labels":{"tier":"ec2"}}`))
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
	r := &runner{name: "ec2", pool: np, joined: map[string]bool{}}
	j := joining{Provider: p, o: o, r: r, provType: "aws"}
	if !j.atCreate() {
		t.Fatal("the aws provider built by internal/provider/build does not join at Create")
	}

	ac, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ac.BaseEndpoint = awssdk.String(moto.URL)
	ec := ec2.NewFromConfig(ac)
	f := provider.Fence{Controller: "c", Epoch: 1}
	joinOf := func(id string) nodeagent.Join {
		t.Helper()
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
		blob, err := tideprovider.BootScriptBlob(script)
		if err != nil {
			t.Fatalf("user data of %s: %v\n%s", id, err, script)
		}
		if !tideprovider.IsNodeJoin(blob) {
			t.Fatalf("user data of %s carries %s, not a join document", id, blob)
		}
		jn, err := nodeagent.Parse(blob)
		if err != nil {
			t.Fatalf("user data of %s: %v", id, err)
		}
		return jn
	}
	for _, id := range []string{"m-1", "m-2"} {
		jn := joinOf(id)
		if jn.Node != id || jn.ProviderID != "tide://aws/"+id || jn.Token != "token-of-tide-node-"+id ||
			jn.Server != "https://10.0.0.1:6443" || jn.Labels["tier"] != "ec2" || jn.Capacity["cpu"] != "2" {
			t.Fatalf("join of %s: %+v", id, jn)
		}
		if _, err := kc.CoreV1().ServiceAccounts("tide-system").Get(ctx, credName(id), metav1.GetOptions{}); err != nil {
			t.Fatalf("ServiceAccount of %s: %v", id, err)
		}
	}
	// Configure of a machine that joined at Create mints nothing more.
	before := len(kc.Actions())
	if _, err := j.Configure(ctx, provider.ConfigureRequest{Fence: f, MachineID: "m-1", Pool: "ec2", Cluster: "kubernetes",
		Bootstrap: []byte("kubernetes")}); err != nil && provider.Kind(err) == provider.KindInvalid {
		t.Fatalf("Configure m-1: %v", err)
	}
	for _, a := range kc.Actions()[before:] {
		if a.GetVerb() == "create" {
			t.Fatalf("Configure of a machine that joined at Create minted: %v", a)
		}
	}

	// Delete revokes m-1's credential (and only its).
	if _, err := j.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "ec2", MachineID: "m-1"}); err != nil {
		t.Fatalf("Delete m-1: %v", err)
	}
	if _, err := kc.CoreV1().ServiceAccounts("tide-system").Get(ctx, credName("m-1"), metav1.GetOptions{}); err == nil {
		t.Fatal("m-1's ServiceAccount survived its Delete")
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Get(ctx, credName("m-1"), metav1.GetOptions{}); err == nil {
		t.Fatal("m-1's ClusterRoleBinding survived its Delete")
	}
	if _, err := kc.CoreV1().ServiceAccounts("tide-system").Get(ctx, credName("m-2"), metav1.GetOptions{}); err != nil {
		t.Fatalf("m-2's ServiceAccount went with m-1: %v", err)
	}
}
