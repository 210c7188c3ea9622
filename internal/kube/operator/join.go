package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubeapi"
	"github.com/tide-project/tide/internal/kube/nodeagent"
	"github.com/tide-project/tide/internal/kube/poolspec"
	"github.com/tide-project/tide/internal/kube/workload"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/sdk/provider"
)

// AgentClusterRole is the ClusterRole of a machine's join credential
// (deploy/rbac.yaml): Nodes and their status, nothing else; its Lease in
// kube-node-lease comes from AgentLeaseClusterRole, bound in that
// namespace only.
const (
	AgentClusterRole      = "tide-node-agent"
	AgentLeaseClusterRole = "tide-node-agent-lease"
	// MachineLabel names the machine a credential object belongs to, and
	// the machine of a Node: every join tide kube renders registers its
	// Node with it (how tide finds a Node named otherwise, e.g. an EKS
	// Node named after its instance's private DNS name; nodes.go).
	MachineLabel = "tide.dev/machine-id"
)

// NodeJoin says how machines of providers other than kwok join the cluster
// as Nodes.
type NodeJoin struct {
	// Server, CA and Insecure are the apiserver as the machines reach it
	// (default: as tide kube reaches it).
	Server   string
	CA       []byte
	Insecure bool
	// Heartbeat is the machines' Node heartbeat period (0: the agent's
	// default, 10s).
	Heartbeat time.Duration
	// TokenTTL is the lifetime of a machine's token (default 30 days); the
	// credential is revoked (its ServiceAccount deleted) when the machine is.
	TokenTTL time.Duration
	// LocalRoot holds the machines of the providers that run them on this
	// host (local, netns), one directory per pool; empty: such pools are
	// refused.
	LocalRoot string
	// Binary is the tide executable those machines run (`tide worker
	// --bootstrap -`, which a join document turns into the Node agent).
	Binary string
}

// credName names a machine's ServiceAccount and bindings.
func credName(machineID string) string { return "tide-node-" + machineID }

// mint creates the machine's own credential (a ServiceAccount bound to
// AgentClusterRole, and to AgentLeaseClusterRole in kube-node-lease) and
// returns the encoded Join that carries a token of it.
func (o *Operator) mint(ctx context.Context, r *runner, machineID, offering, provType string) ([]byte, error) {
	kc := o.cfg.Kube
	if kc == nil {
		return nil, errors.New("no Kubernetes client to mint join credentials with")
	}
	off, ok := findOffering(r.pool.Config.Offerings, offering)
	if !ok {
		return nil, fmt.Errorf("offering %q is not the pool's", offering)
	}
	if r.pool.Join.Mode == poolspec.JoinKubelet {
		capa := map[corev1.ResourceName]string{}
		for k, v := range demand.ResourceList(off.Resources) {
			capa[k] = v.String()
		}
		labels := machineLabels(demand.OfferingLabels(&demand.Pool{Labels: r.pool.Labels}, &off), machineID)
		if r.pool.Join.UserData == poolspec.UserDataEKS {
			return o.eksUserData(ctx, r, machineID, labels)
		}
		return o.mintKubelet(ctx, r, machineID, provType, capa, labels)
	}
	name := credName(machineID)
	labels := map[string]string{demand.PoolLabel: r.name, MachineLabel: machineID}
	meta := metav1.ObjectMeta{Name: name, Namespace: o.cfg.Namespace, Labels: labels}
	if _, err := kc.CoreV1().ServiceAccounts(o.cfg.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("service account: %w", err)
	}
	subj := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: o.cfg.Namespace}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AgentClusterRole}}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("cluster role binding: %w", err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nodeagent.LeaseNamespace, Labels: labels}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AgentLeaseClusterRole}}
	if _, err := kc.RbacV1().RoleBindings(nodeagent.LeaseNamespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("role binding: %w", err)
	}
	ttl := o.cfg.Join.TokenTTL
	if ttl <= 0 {
		ttl = 30 * 24 * time.Hour
	}
	secs := int64(ttl / time.Second)
	tr, err := kc.CoreV1().ServiceAccounts(o.cfg.Namespace).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token request: %w", err)
	}
	capa := map[corev1.ResourceName]string{}
	for k, v := range demand.ResourceList(off.Resources) {
		capa[k] = v.String()
	}
	var taints []corev1.Taint
	for _, t := range r.pool.Taints {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	j := nodeagent.Join{Server: o.cfg.Join.Server, CA: string(o.cfg.Join.CA), Insecure: o.cfg.Join.Insecure, Token: tr.Status.Token,
		Node: machineID, ProviderID: ProviderID(provType, machineID), Labels: machineLabels(agentLabels(r, &off, machineID), machineID),
		Annotations: map[string]string{MachineLabel: machineID}, Taints: taints, Capacity: capa,
		HeartbeatSeconds: int(o.cfg.Join.Heartbeat / time.Second)}
	return j.Encode()
}

// agentLabels are the labels of an agent-joined machine's Node: the pool's,
// its offering's zone and instance type, and its hostname (a kubelet sets
// that one itself; tide's agent does not).
func agentLabels(r *runner, off *capacity.Offering, machineID string) map[string]string {
	l := demand.OfferingLabels(&demand.Pool{Labels: r.pool.Labels}, off)
	l[corev1.LabelHostname] = machineID
	return l
}

// ProviderID is the spec.providerID of the Node of a machine of a non-kwok
// provider: tide://<provider type>/<machine id>.
func ProviderID(provType, machineID string) string { return "tide://" + provType + "/" + machineID }

// revoke deletes the machine's credential: its tokens stop working at once
// (a bound token is checked against its ServiceAccount on every request);
// for a kubelet pool's machine, its bootstrap token's Secret (a cluster
// whose tide RBAC predates kubelet pools lets tide touch no Secret, so
// agent pools do not try).
func (o *Operator) revoke(ctx context.Context, r *runner, machineID string) error {
	kc := o.cfg.Kube
	if kc == nil {
		return nil
	}
	name := credName(machineID)
	var errs []error
	ignore := func(err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if r.pool.Join.Mode == poolspec.JoinKubelet {
		ignore(kc.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, bootstrapSecretName(r.name, machineID), metav1.DeleteOptions{}))
	}
	ignore(kc.CoreV1().ServiceAccounts(o.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{}))
	ignore(kc.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}))
	ignore(kc.RbacV1().RoleBindings(nodeagent.LeaseNamespace).Delete(ctx, name, metav1.DeleteOptions{}))
	return errors.Join(errs...)
}

func findOffering(offs []capacity.Offering, name string) (capacity.Offering, bool) {
	i := slices.IndexFunc(offs, func(o capacity.Offering) bool { return o.Name() == name })
	if i < 0 {
		return capacity.Offering{}, false
	}
	return offs[i], true
}

// joining hands each machine of a non-kwok pool its own join credential:
// at Configure (or at Create when the provider's machines boot their agent
// by themselves, e.g. EC2 user data), and revokes it at Delete, before the
// machine goes; the machine's Node object is removed after it.
type joining struct {
	provider.Provider
	o        *Operator
	r        *runner
	provType string
}

type selfJoining interface{ JoinsAtCreate() bool }

func (j joining) atCreate() bool {
	s, ok := j.Provider.(selfJoining)
	return ok && s.JoinsAtCreate()
}

// Create mints the machine's Join first when the machine boots its agent
// by itself.
func (j joining) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	if !j.atCreate() || req.Validate() != nil {
		return j.Provider.Create(ctx, req)
	}
	blob, err := j.o.mint(ctx, j.r, req.MachineID, req.Offering, j.provType)
	if err != nil {
		return provider.Ack{}, fmt.Errorf("create machine %q: join credential: %w", req.MachineID, provider.NewTransient(err, 0))
	}
	req.Bootstrap = blob
	ack, err := j.Provider.Create(ctx, req)
	switch provider.Kind(err) {
	case provider.KindInvalid, provider.KindInsufficientCapacity, provider.KindQuotaExceeded:
		err = errors.Join(err, j.o.revoke(ctx, j.r, req.MachineID)) // nothing has the id
	}
	return ack, err
}

// Configure mints the machine's Join and configures the machine with it.
func (j joining) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	if j.atCreate() || req.Validate() != nil {
		return j.Provider.Configure(ctx, req)
	}
	m, err := j.Provider.Get(ctx, req.MachineID)
	if err != nil {
		return provider.Ack{}, fmt.Errorf("configure machine %q: %w", req.MachineID, err)
	}
	blob, err := j.o.mint(ctx, j.r, req.MachineID, m.Offering, j.provType)
	if err != nil {
		return provider.Ack{}, fmt.Errorf("configure machine %q: join credential: %w", req.MachineID, provider.NewTransient(err, 0))
	}
	req.Bootstrap = blob
	return j.Provider.Configure(ctx, req)
}

// Delete revokes the machine's credential, deletes the machine, then its
// Node object.
func (j joining) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	if err := req.Validate(); err != nil {
		return j.Provider.Delete(ctx, req)
	}
	if err := j.o.revoke(ctx, j.r, req.MachineID); err != nil {
		return provider.Ack{}, fmt.Errorf("delete machine %q: revoke its credential: %w", req.MachineID, provider.NewTransient(err, 0))
	}
	ack, err := j.Provider.Delete(ctx, req)
	if err != nil && !provider.IsNotFound(err) {
		return ack, err
	}
	// Gone already (NotFound: a fleet machine given back at once) or going:
	// its Node goes too.
	if err := j.o.cfg.API.DeleteNode(ctx, j.r.nodeOf(ctx, j.o.cfg.Client, req.MachineID)); err != nil && !errors.Is(err, kubeapi.ErrNotFound) {
		return provider.Ack{}, fmt.Errorf("delete machine %q: its Node: %w", req.MachineID, provider.NewTransient(err, 0))
	}
	return ack, err
}

// buildEnv is what the providers of NodePool r's machines are built with
// (the construction `tide head` uses, internal/provider/build). A
// fleet-backed NodePool's machines join with the credential mint makes for
// each when the fleet asks, and a preemption cordons the machine's Node.
func (o *Operator) buildEnv(r *runner) build.Env {
	return build.Env{MachinesDir: o.cfg.Join.LocalRoot, Binary: o.cfg.Join.Binary, Clock: o.clk, Logger: o.log,
		Join: func(ctx context.Context, _, machine, offering, _ string) ([]byte, error) {
			return o.mint(ctx, r, machine, offering, "fleet")
		},
		Preempt: func(ctx context.Context, _, machine, why string, grace time.Duration) error {
			if err := workload.New(o.cfg.API, r.nodeName, o.log).Cordon(ctx, controller.Node{MachineID: machine}); err != nil {
				return err
			}
			o.event(r.obj, corev1.EventTypeWarning, "Preempted",
				fmt.Sprintf("machine %s: %s; its Node is cordoned and the fleet drains it in %s", machine, why, grace))
			return nil
		}}
}

// Get reports the machine; see joined.
func (j joining) Get(ctx context.Context, id string) (provider.Machine, error) {
	m, err := j.Provider.Get(ctx, id)
	if err == nil {
		j.joined(ctx, &m)
	}
	return m, err
}

// List reports the machines; see joined.
func (j joining) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	ms, err := j.Provider.List(ctx, f)
	for i := range ms {
		j.joined(ctx, &ms[i])
	}
	return ms, err
}

// joined shows a Configured machine as Configuring until its Node is
// Ready: the provider only knows that the machine runs its agent, the
// pool has a Node once the agent registered it (a machine that never gets
// there is replaced after the launch timeout). Once seen Ready, the
// machine stays Configured for this runner whatever its Node does.
func (j joining) joined(ctx context.Context, m *provider.Machine) {
	if m.State != provider.Configured {
		return
	}
	j.r.mu.Lock()
	seen := j.r.joined[m.ID]
	j.r.mu.Unlock()
	if seen {
		return
	}
	var n corev1.Node
	if err := j.o.cfg.Client.Get(ctx, client.ObjectKey{Name: j.r.nodeOf(ctx, j.o.cfg.Client, m.ID)}, &n); err != nil || !nodeReady(&n) {
		m.State = provider.Configuring
		return
	}
	j.r.mu.Lock()
	j.r.joined[m.ID] = true
	j.r.mu.Unlock()
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeOf returns the name of the Node of machine id (nodeIndex.find); a
// runner without an index (a test's) names it id.
func (r *runner) nodeOf(ctx context.Context, c client.Reader, id string) string {
	if r == nil || r.nodes == nil {
		return id
	}
	return r.nodes.find(ctx, c, id)
}
