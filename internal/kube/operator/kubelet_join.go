package operator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/kubelet"
	"github.com/tide-project/tide/internal/kube/nodeagent"
	"github.com/tide-project/tide/internal/kube/poolspec"
)

// BootstrapGroup is the extra group of every bootstrap token tide kube
// mints (besides system:bootstrappers, which every bootstrap token has).
const BootstrapGroup = "system:bootstrappers:tide"

// BootstrapBindings are the ClusterRoleBindings a cluster needs for
// kubelets joining by TLS bootstrap (what kubeadm creates): role → the
// group it must be bound to. deploy/rbac.yaml has them.
var BootstrapBindings = []struct{ Role, Group string }{
	{"system:node-bootstrapper", "system:bootstrappers"},
	{"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers"},
	{"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
}

const tokenChars = "abcdefghijklmnopqrstuvwxyz0123456789"

// bootstrapTokenID is the id of a machine's bootstrap token: derived from
// its pool and id, so that a retried mint and the revocation find the
// token's Secret (bootstrap-token-<id>) by name, without listing the
// Secrets of kube-system.
func bootstrapTokenID(pool, machineID string) string {
	sum := sha256.Sum256([]byte("tide bootstrap token\x00" + pool + "\x00" + machineID))
	var b strings.Builder
	for i := range 6 {
		b.WriteByte(tokenChars[int(sum[i])%len(tokenChars)])
	}
	return b.String()
}

func bootstrapSecretName(pool, machineID string) string {
	return "bootstrap-token-" + bootstrapTokenID(pool, machineID)
}

// randomSecret returns the 16-character secret half of a bootstrap token.
func randomSecret() (string, error) {
	var b strings.Builder
	max := big.NewInt(int64(len(tokenChars)))
	for range 16 {
		n, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", err
		}
		b.WriteByte(tokenChars[n.Int64()])
	}
	return b.String(), nil
}

// checkBootstrapRBAC reports the BootstrapBindings the cluster lacks.
func (o *Operator) checkBootstrapRBAC(ctx context.Context) error {
	list, err := o.cfg.Kube.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list ClusterRoleBindings: %w", err)
	}
	var missing []string
	for _, want := range BootstrapBindings {
		found := false
		for _, b := range list.Items {
			if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != want.Role {
				continue
			}
			for _, s := range b.Subjects {
				found = found || s.Kind == "Group" && s.Name == want.Group
			}
		}
		if !found {
			missing = append(missing, want.Role+" → group "+want.Group)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the cluster lacks the ClusterRoleBindings of kubelet TLS bootstrap (tide kube install has them): %s",
			strings.Join(missing, "; "))
	}
	return nil
}

// mintKubelet makes the machine's bootstrap token (a Secret of type
// bootstrap.kubernetes.io/token in kube-system, for authentication only,
// expiring after the pool's token_ttl, labelled with the pool and machine)
// and returns the kubelet-mode Join that carries it.
func (o *Operator) mintKubelet(ctx context.Context, r *runner, machineID, provType string,
	capa map[corev1.ResourceName]string, labels map[string]string) ([]byte, error) {
	if err := o.checkBootstrapRBAC(ctx); err != nil {
		return nil, err
	}
	ca, err := o.clusterCA(ctx)
	if err != nil {
		return nil, err
	}
	id := bootstrapTokenID(r.name, machineID)
	sec, err := randomSecret()
	if err != nil {
		return nil, err
	}
	ttl := r.pool.Join.TokenLifetime()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{demand.PoolLabel: r.name, MachineLabel: machineID}},
		Type: corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "tide kube: the join of machine " + machineID + " of NodePool " + r.name,
			"token-id":                       id,
			"token-secret":                   sec,
			"expiration":                     o.clk.Now().Add(ttl).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              BootstrapGroup,
		},
	}
	if r.pool.Join.UserData == poolspec.UserDataKubeadm {
		// kubeadm's discovery checks the cluster-info ConfigMap the
		// bootstrapsigner signs for this token.
		s.StringData["usage-bootstrap-signing"] = "true"
	}
	secrets := o.cfg.Kube.CoreV1().Secrets(metav1.NamespaceSystem)
	_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A retried Configure: the old token is replaced (its machine got
		// no Join, or gets this one).
		if derr := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
			return nil, fmt.Errorf("bootstrap token: %w", derr)
		}
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("bootstrap token: %w", err)
	}
	var taints []corev1.Taint
	for _, t := range r.pool.Taints {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	pj := r.pool.Join
	j := nodeagent.Join{Mode: nodeagent.ModeKubelet, Server: o.cfg.Join.Server, CA: string(ca), Insecure: o.cfg.Join.Insecure,
		Token: id + "." + sec, Node: machineID, ProviderID: ProviderID(provType, machineID), Labels: labels,
		Taints: taints, Capacity: capa,
		Kubelet: &nodeagent.Kubelet{Kubelet: pj.Kubelet, Containerd: pj.Containerd, Ctr: pj.Ctr, CNIBinDir: pj.CNIBinDir,
			SandboxImage: pj.SandboxImage, Images: pj.Images, PodSubnet: pj.PodSubnet}}
	if !nodeagent.ValidBootstrapToken(j.Token) {
		return nil, errors.New("bootstrap token: malformed") // cannot happen: both halves come from tokenChars
	}
	if r.pool.Join.UserData == poolspec.UserDataKubeadm {
		return kubelet.KubeadmUserData(j, r.name)
	}
	return j.Encode()
}

// clusterCA is the CA kubelet machines trust: tide kube's --node-ca, else
// the cluster's root CA as kube-controller-manager publishes it in every
// namespace (the kubelet checks the apiserver's client certificate, for
// logs and exec, with it).
func (o *Operator) clusterCA(ctx context.Context) ([]byte, error) {
	if ca := o.cfg.Join.CA; len(ca) > 0 {
		return ca, nil
	}
	cm, err := o.cfg.Kube.CoreV1().ConfigMaps(o.cfg.Namespace).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the cluster CA (ConfigMap kube-root-ca.crt in %s): %w", o.cfg.Namespace, err)
	}
	return []byte(cm.Data["ca.crt"]), nil
}

// eksUserData renders the user data of an EKS node (user_data eks): the
// NodeConfig of nodeadm with the pool's cluster settings, the Node's
// labels (the machine label among them) and the pool's taints. Nothing is
// minted: an EKS node authenticates with its instance role, which the
// cluster maps to system:nodes (an access entry of type EC2_LINUX, or
// aws-auth), so the machine holds no credential of tide's and its Delete
// has nothing of it to revoke. The CA is the pool's
// (node_join.eks.certificate_authority), else as for kubelet machines.
func (o *Operator) eksUserData(ctx context.Context, r *runner, machineID string, labels map[string]string) ([]byte, error) {
	e := r.pool.Join.EKS
	if e == nil {
		return nil, errors.New("node_join.eks is not set") // poolspec refuses such a spec
	}
	ca := e.CA()
	if len(ca) == 0 {
		var err error
		if ca, err = o.clusterCA(ctx); err != nil {
			return nil, err
		}
	}
	var taints []corev1.Taint
	for _, t := range r.pool.Taints {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return kubelet.EKSUserData(kubelet.EKSNode{Machine: machineID, Pool: r.name, Cluster: e.Cluster, Endpoint: e.APIServerEndpoint,
		CA: ca, ServiceCIDR: e.ServiceCIDR, Labels: labels, Taints: taints})
}
