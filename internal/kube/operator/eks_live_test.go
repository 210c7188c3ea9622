package operator_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/kubelet"
	"github.com/tide-project/tide/internal/kube/kubetest"
	"github.com/tide-project/tide/internal/kube/kwok"
	"github.com/tide-project/tide/internal/kube/operator"
	"github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
)

// eksNodeadm plays nodeadm and the kubelet of an EKS AMI for the
// instances moto runs: for each running instance of a pool, it reads the
// instance's user data as nodeadm does (kubelet.ParseEKSUserData) and
// registers the Node nodeadm would: named after the instance's private DNS
// name, providerID aws:///<zone>/<instance id>, the labels and taints of
// the NodeConfig's kubelet flags. kwok keeps it Ready and runs its pods
// (the Node has kwok's annotation).
type eksNodeadm struct {
	l        *live
	ec       *ec2.Client
	pool     string
	endpoint string
	ca       []byte
	// registered: instance id → Node name; machines: machine id →
	// instance id.
	registered map[string]string
	machines   map[string]string
}

// sync registers the Nodes of the pool's running instances not registered
// yet; it reports what it found wrong in their user data.
func (e *eksNodeadm) sync(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	out, err := e.ec.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:tide:pool"), Values: []string{e.pool}},
		{Name: awssdk.String("instance-state-name"), Values: []string{"running"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range out.Reservations {
		for _, in := range res.Instances {
			iid := awssdk.ToString(in.InstanceId)
			if _, ok := e.registered[iid]; ok {
				continue
			}
			attr, err := e.ec.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{
				InstanceId: in.InstanceId, Attribute: types.InstanceAttributeNameUserData})
			if err != nil || attr.UserData == nil {
				t.Fatalf("user data of %s: %v", iid, err)
			}
			ud, err := base64.StdEncoding.DecodeString(awssdk.ToString(attr.UserData.Value))
			if err != nil {
				t.Fatal(err)
			}
			nc, err := kubelet.ParseEKSUserData(ud)
			if err != nil {
				t.Fatalf("instance %s: %v\n%s", iid, err, ud)
			}
			if cl := nc.Spec.Cluster; cl.Name != "tide-test" || cl.APIServerEndpoint != e.endpoint || string(cl.CertificateAuthority) != string(e.ca) ||
				cl.CIDR != "10.96.0.0/12" {
				t.Fatalf("instance %s: NodeConfig cluster %+v", iid, cl)
			}
			labels := map[string]string{corev1.LabelHostname: awssdk.ToString(in.PrivateDnsName)}
			if flag, ok := nc.Flag("node-labels"); ok {
				for _, kv := range strings.Split(flag, ",") {
					k, v, _ := strings.Cut(kv, "=")
					labels[k] = v
				}
			}
			var taints []corev1.Taint
			if flag, ok := nc.Flag("register-with-taints"); ok {
				for _, s := range strings.Split(flag, ",") {
					kv, effect, _ := strings.Cut(s, ":")
					k, v, _ := strings.Cut(kv, "=")
					taints = append(taints, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)})
				}
			}
			id := labels[operator.MachineLabel]
			if other, ok := e.machines[id]; ok || id == "" {
				t.Fatalf("instance %s: user data of machine %q, as instance %s's", iid, id, other)
			}
			e.machines[id] = iid
			capa := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
				corev1.ResourcePods: resource.MustParse("110")}
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: awssdk.ToString(in.PrivateDnsName), Labels: labels,
				Annotations: map[string]string{kwok.KwokAnnotation: "fake"}},
				Spec:   corev1.NodeSpec{ProviderID: aws.ProviderIDOf(awssdk.ToString(in.Placement.AvailabilityZone), iid), Taints: taints},
				Status: corev1.NodeStatus{Capacity: capa, Allocatable: capa}}
			if _, err := e.l.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			e.registered[iid] = n.Name
		}
	}
}

// TestLiveEKSNodes: an aws NodePool with node_join.user_data eks on moto
// and the live control plane. Two pending pods make tide launch two
// instances whose user data is nodeadm's NodeConfig for the cluster (its
// endpoint, CA and service CIDR); the test registers the Nodes nodeadm
// would (named after the instances' private DNS names, providerID
// aws:///<zone>/<instance id>, the flags' labels and taint; kwok plays the
// kubelet). tide finds them by the machine label: the machines join (the
// pool's status counts them), the pods are bound; no credential is minted.
// The pods deleted, each Node is cordoned, drained and deleted with its
// instance. Then a bare pod gets a Node, and deleting the NodePool drains
// it through the Eviction API (tide's log names the DNS-named Node); its
// Node, instance and the NodePool go.
func TestLiveEKSNodes(t *testing.T) {
	moto := awstest.StartMoto(t)
	awstest.Env(t)
	l := startLive(t)
	ctx := context.Background()
	ca, err := os.ReadFile(l.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	const pool = "eks-live" // moto is shared by the package's tests: not the pool of TestAWSEKSUserData
	l.nodePool(t, pool, `{"nodes":{"min":0,"max":4},
  "provider":{"type":"aws","options":{"name":"live-eks-`+time.Now().Format("150405.000000")+`","endpoint":"`+moto.URL+`",
    "image_id":"ami-03cf127a","instance_types":["m5.xlarge"],"capacity":["on-demand"],"max_backoff":"20ms"}},
  "offerings":[{"type":"m5.xlarge","zone":"us-east-1a","cpu":"4","memory":"16Gi","price":0.2}],
  "node_labels":{"tier":"eks"},"node_taints":[{"key":"dedicated","value":"eks","effect":"NoSchedule"}],
  "node_join":{"mode":"kubelet","user_data":"eks","eks":{"cluster":"tide-test","api_server_endpoint":"`+l.Server+`",
    "certificate_authority":"`+base64.StdEncoding.EncodeToString(ca)+`","service_cidr":"10.96.0.0/12"}}}`)
	logs := &syncBuffer{}
	op := l.runOperatorWith(t, operator.Options{Identity: "eks", Pools: []string{pool},
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), logs), &slog.HandlerOptions{Level: slog.LevelInfo}))})

	ac, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ac.BaseEndpoint = awssdk.String(moto.URL)
	na := &eksNodeadm{l: l, ec: ec2.NewFromConfig(ac), pool: pool, endpoint: l.Server, ca: ca, registered: map[string]string{},
		machines: map[string]string{}}
	tolerate := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "eks", Effect: corev1.TaintEffectNoSchedule}
	// One pod, then the other: moto's CreateFleet launches from the
	// launch template's latest version whatever version it is given, so
	// two concurrent Creates would both get the user data of the later
	// one (EC2 launches the version asked for).
	began := time.Now()
	for i := range 2 {
		l.cpuPods(t, fmt.Sprintf("%s%d", pool, i), "eks", 1, tolerate)
		kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
			na.sync(t)
			st, _ := op.PoolStatus(pool)
			bound := 0
			for k := range i + 1 {
				p, err := l.cs.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("%s%d-0", pool, k), metav1.GetOptions{})
				if err == nil && p.Spec.NodeName != "" {
					bound++
				}
			}
			return len(na.registered) == i+1 && st.Current == i+1 && st.Pending == 0 && bound == i+1,
				fmt.Sprintf("%d instances with a Node %v, pool %d joined %d launching (%+v), %d pods bound",
					len(na.registered), na.registered, st.Current, st.Pending, st.Nodes, bound)
		})
	}
	t.Logf("2 EKS-style Nodes joined and got the pods in %v", time.Since(began).Round(time.Millisecond))
	nodes := l.poolNodes(t, pool)
	machines := map[string]bool{}
	for _, n := range nodes {
		if !strings.HasSuffix(n.Name, ".ec2.internal") || !strings.HasPrefix(n.Spec.ProviderID, "aws:///us-east-1a/i-") {
			t.Errorf("Node %s (%s): not named and identified as nodeadm does", n.Name, n.Spec.ProviderID)
		}
		id := n.Labels[operator.MachineLabel]
		if !strings.HasPrefix(id, pool+"-") || n.Labels["tier"] != "eks" ||
			!slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == "dedicated" && tt.Value == "eks" }) {
			t.Errorf("Node %s: labels %v, taints %v", n.Name, n.Labels, n.Spec.Taints)
		}
		machines[id] = true
	}
	if len(machines) != 2 {
		t.Errorf("the Nodes name machines %v, want 2", machines)
	}
	secrets, err := l.cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: operator.MachineLabel})
	if err != nil || len(secrets.Items) != 0 {
		t.Errorf("EKS machines got bootstrap tokens: %d %v", len(secrets.Items), err)
	}

	// Scale to 0: each Node is drained and deleted with its instance.
	for i := range 2 {
		if err := l.cs.CoreV1().Pods("default").Delete(ctx, fmt.Sprintf("%s%d-0", pool, i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	began = time.Now()
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		n := len(l.poolNodes(t, pool))
		live := na.running(t)
		return n == 0 && live == 0, fmt.Sprintf("%d Nodes, %d instances running", n, live)
	})
	t.Logf("scaled down: Nodes and instances gone in %v", time.Since(began).Round(time.Millisecond))

	// A bare pod, then the NodePool deleted: its Node is drained through
	// the Eviction API (tide's log says so, naming the Node), then it and
	// its instance go, then the NodePool.
	zero := int64(0)
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "eks-bare", Namespace: "default"},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"tier": "eks"}, Tolerations: []corev1.Toleration{tolerate},
			TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{Name: "c", Image: "x",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}}
	if _, err := l.cs.CoreV1().Pods("default").Create(ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		na.sync(t)
		p, err := l.cs.CoreV1().Pods("default").Get(ctx, bare.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node = p.Spec.NodeName
		return node != "" && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("pod on %q, %s", node, p.Status.Phase)
	})
	if !strings.HasSuffix(node, ".ec2.internal") {
		t.Fatalf("the bare pod runs on %s, not a Node named after an instance", node)
	}
	if code, body, err := l.Do(http.MethodDelete, "/apis/tide.dev/v1alpha1/nodepools/"+pool, nil); err != nil || code >= 300 {
		t.Fatalf("delete NodePool: %d %s %v", code, body, err)
	}
	kubetest.Eventually(t, 3*time.Minute, func() (bool, string) {
		_, perr := l.cs.CoreV1().Pods("default").Get(ctx, bare.Name, metav1.GetOptions{})
		_, nerr := l.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		code, _, derr := l.Do(http.MethodGet, "/apis/tide.dev/v1alpha1/nodepools/"+pool, nil)
		live := na.running(t)
		return apierrors.IsNotFound(perr) && apierrors.IsNotFound(nerr) && derr == nil && code == http.StatusNotFound && live == 0,
			fmt.Sprintf("pod: %v; Node %s: %v; NodePool: %d; %d instances running", perr, node, nerr, code, live)
	})
	if want := fmt.Sprintf(`msg="evicted pod" node=%s pod=default/%s`, node, bare.Name); !strings.Contains(logs.String(), want) {
		t.Errorf("tide kube's log has no %s", want)
	}
	t.Logf("NodePool deleted: its EKS-style Node %s drained through the Eviction API; it, its instance and the NodePool gone", node)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running counts the pool's instances moto has running or pending.
func (e *eksNodeadm) running(t *testing.T) int {
	t.Helper()
	out, err := e.ec.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: awssdk.String("tag:tide:pool"), Values: []string{e.pool}},
		{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running"}}}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range out.Reservations {
		n += len(r.Instances)
	}
	return n
}
