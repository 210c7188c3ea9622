// Package nodeagent is `tide kube node`: the small agent a machine from a
// non-kwok provider (local, netns, plugin, cloud) runs so that it joins a
// Kubernetes cluster as a Node. It reads a Join (minted per machine by
// `tide kube`: the apiserver, a token of the machine's own ServiceAccount
// whose RBAC allows only Nodes and node Leases, and the Node to register),
// registers the Node with its providerID, the pool's labels and taints and
// the machine's capacity, and keeps the Node's Ready condition and its
// Lease in kube-node-lease fresh until it is stopped (the machine is
// deleted: the process is killed and the credential revoked).
//
// It is not a kubelet: it runs no containers. On a machine with a container
// runtime the same bootstrap slot can run `kubeadm join` instead (see
// docs/kubernetes.md).
package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tide-project/tide/internal/provider"
)

// JoinVersion is the version of the Join wire form.
const JoinVersion = 1

// LeaseNamespace holds the node Leases (as the kubelet's).
const LeaseNamespace = "kube-node-lease"

// ReadyReason is the reason of the Ready condition the agent writes.
const ReadyReason = "TideNodeAgentReady"

// Join is what a machine needs to join as a Node.
type Join struct {
	// Kind is provider.NodeJoinKind: `tide worker --bootstrap` tells a
	// Join from a head's bootstrap by it.
	Kind    string `json:"kind"`
	Version int    `json:"version"`
	// Server is the apiserver's URL; CA its PEM CA bundle (empty: the
	// system roots); Insecure skips verification (test clusters only: set
	// when tide kube itself talks to the apiserver that way).
	Server   string `json:"server"`
	CA       string `json:"ca,omitempty"`
	Insecure bool   `json:"insecure,omitempty"`
	// Token is the bearer token of the machine's ServiceAccount.
	Token string `json:"token"`
	// Node is the Node's name, ProviderID its spec.providerID.
	Node       string `json:"node"`
	ProviderID string `json:"provider_id"`
	// Labels, Annotations and Taints are put on the Node.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Taints      []corev1.Taint    `json:"taints,omitempty"`
	// Capacity is the machine's capacity (also its allocatable).
	Capacity map[corev1.ResourceName]string `json:"capacity"`
	// HeartbeatSeconds is the agent's heartbeat period when its
	// Config.Interval is not set (0: 10 s).
	HeartbeatSeconds int `json:"heartbeat_seconds,omitempty"`
	// Mode is how the machine joins: "" for this agent, ModeKubelet for a
	// real kubelet (internal/kube/kubelet), whose Token is then a
	// bootstrap token (<id>.<secret>) it joins with by TLS bootstrap, and
	// whose Capacity is what its Node should offer (the kubelet reserves
	// the rest of a bigger machine).
	Mode string `json:"mode,omitempty"`
	// Kubelet configures a ModeKubelet machine.
	Kubelet *Kubelet `json:"kubelet,omitempty"`
}

// ModeKubelet is the Join mode of a machine that runs a real kubelet.
const ModeKubelet = "kubelet"

// Kubelet is what a machine joining with a real kubelet runs; empty fields
// take the machine's defaults (internal/kube/kubelet).
type Kubelet struct {
	// Kubelet, Containerd and Ctr are the executables; CNIBinDir holds the
	// CNI plugins.
	Kubelet    string `json:"kubelet,omitempty"`
	Containerd string `json:"containerd,omitempty"`
	Ctr        string `json:"ctr,omitempty"`
	CNIBinDir  string `json:"cni_bin_dir,omitempty"`
	// SandboxImage is the pause image; Images are docker-archive tarballs
	// imported into the runtime before the kubelet starts.
	SandboxImage string   `json:"sandbox_image,omitempty"`
	Images       []string `json:"images,omitempty"`
	// PodSubnet is the IPv4 /16 the machine's pods get a /24 of (the
	// third octet is the last octet of the machine's address).
	PodSubnet string `json:"pod_subnet,omitempty"`
}

// bootstrapToken is the form of a bootstrap token (kubeadm's): a 6
// character id and a 16 character secret.
var bootstrapToken = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// ValidBootstrapToken reports whether s has the form of a bootstrap token;
// the apiserver answers anything else with "invalid bearer token", which a
// kubelet retries for ever.
func ValidBootstrapToken(s string) bool { return bootstrapToken.MatchString(s) }

// Encode returns the Join as one line of JSON.
func (j Join) Encode() ([]byte, error) {
	j.Kind, j.Version = provider.NodeJoinKind, JoinVersion
	return json.Marshal(j)
}

// Parse decodes and checks a Join; errors name the field.
func Parse(b []byte) (Join, error) {
	var j Join
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(b))), &j); err != nil {
		return Join{}, fmt.Errorf("join: %w", err)
	}
	var errs []error
	if j.Kind != provider.NodeJoinKind {
		errs = append(errs, fmt.Errorf("kind: want %q, got %q", provider.NodeJoinKind, j.Kind))
	}
	if j.Version != JoinVersion {
		errs = append(errs, fmt.Errorf("version: want %d, got %d", JoinVersion, j.Version))
	}
	if !strings.HasPrefix(j.Server, "https://") && !strings.HasPrefix(j.Server, "http://") {
		errs = append(errs, fmt.Errorf("server: want an http(s) URL, got %q", j.Server))
	}
	switch {
	case j.Token == "":
		errs = append(errs, errors.New("token: must be set"))
	case j.Mode == ModeKubelet && !ValidBootstrapToken(j.Token):
		errs = append(errs, errors.New("token: a kubelet joins with a bootstrap token <6 of [a-z0-9]>.<16 of [a-z0-9]>"))
	}
	switch j.Mode {
	case "":
	case ModeKubelet:
		if j.Kubelet == nil {
			j.Kubelet = &Kubelet{}
		}
	default:
		errs = append(errs, fmt.Errorf("mode: %q (want empty for the Node agent, or %q)", j.Mode, ModeKubelet))
	}
	if j.Node == "" {
		errs = append(errs, errors.New("node: must be set"))
	}
	if j.ProviderID == "" {
		errs = append(errs, errors.New("provider_id: must be set"))
	}
	if j.HeartbeatSeconds < 0 {
		errs = append(errs, fmt.Errorf("heartbeat_seconds: must not be negative, got %d", j.HeartbeatSeconds))
	}
	for k, v := range j.Capacity {
		if _, err := resource.ParseQuantity(v); err != nil {
			errs = append(errs, fmt.Errorf("capacity.%s: %w", k, err))
		}
	}
	if len(errs) > 0 {
		return Join{}, fmt.Errorf("join: %w", errors.Join(errs...))
	}
	return j, nil
}

// Config tunes Run.
type Config struct {
	// Interval is the heartbeat period (default: the Join's
	// HeartbeatSeconds, else 10s); the Lease lasts four of them.
	Interval time.Duration
	Logger   *slog.Logger
}

// Run registers the Node and heartbeats until ctx ends. A failed
// heartbeat is logged and retried; Run returns an error only when the Node
// cannot be registered at all (ctx bounds the tries).
func Run(ctx context.Context, j Join, cfg Config) error {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Duration(j.HeartbeatSeconds) * time.Second
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rc := &rest.Config{Host: j.Server, BearerToken: j.Token, QPS: 5, Burst: 10, Timeout: 30 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(j.CA), Insecure: j.Insecure}}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("node agent: %w", err)
	}
	a := &agent{cs: cs, j: j, interval: cfg.Interval, log: log.With("node", j.Node)}
	for {
		err := a.register(ctx)
		if err == nil {
			break
		}
		log.Warn("register the Node; retried", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("node agent: register Node %s: %w", j.Node, err)
		case <-time.After(time.Second):
		}
	}
	log.Info("Node registered", "node", j.Node, "providerID", j.ProviderID)
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		if err := a.heartbeat(ctx); err != nil && ctx.Err() == nil {
			log.Warn("heartbeat failed; retried", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type agent struct {
	cs       kubernetes.Interface
	j        Join
	interval time.Duration
	log      *slog.Logger
}

func (a *agent) resources() corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	for k, v := range a.j.Capacity {
		out[k] = resource.MustParse(v)
	}
	return out
}

func (a *agent) ready(now metav1.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: ReadyReason,
		Message: "tide node agent is running", LastHeartbeatTime: now, LastTransitionTime: now}
}

// register creates the Node, or, when it exists (the agent restarted),
// brings its template back (labels, taints, providerID).
func (a *agent) register(ctx context.Context) error {
	now := metav1.Now()
	res := a.resources()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: a.j.Node, Labels: a.j.Labels, Annotations: a.j.Annotations},
		Spec:       corev1.NodeSpec{ProviderID: a.j.ProviderID, Taints: a.j.Taints},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res, Conditions: []corev1.NodeCondition{a.ready(now)},
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "tide-node-agent", OperatingSystem: "linux", Architecture: "amd64"}},
	}
	_, err := a.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = a.reclaim(ctx)
	}
	if err != nil {
		return err
	}
	return a.heartbeat(ctx)
}

// reclaim puts the Join's labels and providerID back on a Node that
// exists (the agent restarted); a Node of another machine is refused.
func (a *agent) reclaim(ctx context.Context) error {
	got, err := a.cs.CoreV1().Nodes().Get(ctx, a.j.Node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if got.Spec.ProviderID != "" && got.Spec.ProviderID != a.j.ProviderID {
		return fmt.Errorf("Node %s belongs to %s, not %s", a.j.Node, got.Spec.ProviderID, a.j.ProviderID)
	}
	if got.Labels == nil {
		got.Labels = map[string]string{}
	}
	for k, v := range a.j.Labels {
		got.Labels[k] = v
	}
	got.Spec.ProviderID = a.j.ProviderID
	_, err = a.cs.CoreV1().Nodes().Update(ctx, got, metav1.UpdateOptions{})
	return err
}

// heartbeat writes the Ready condition (and capacity) and renews the Lease.
func (a *agent) heartbeat(ctx context.Context) error {
	now := metav1.Now()
	n, err := a.cs.CoreV1().Nodes().Get(ctx, a.j.Node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cond := a.ready(now)
	kept := n.Status.Conditions[:0]
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				cond.LastTransitionTime = c.LastTransitionTime
			}
			continue
		}
		kept = append(kept, c)
	}
	n.Status.Conditions = append(kept, cond)
	res := a.resources()
	n.Status.Capacity, n.Status.Allocatable = res, res
	if _, err := a.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	return a.renewLease(ctx, n)
}

func (a *agent) renewLease(ctx context.Context, n *corev1.Node) error {
	leases := a.cs.CoordinationV1().Leases(LeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	secs := int32(4 * a.interval / time.Second)
	holder := a.j.Node
	l, err := leases.Get(ctx, a.j.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: a.j.Node, Namespace: LeaseNamespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now}}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		return nil
	} else if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &secs, &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}
