// Package poolspec reads the spec of a NodePool (tide.dev/v1alpha1) into
// the config.Pool that `tide head --config` builds its pools from, plus the
// labels and taints of the pool's nodes. It is the parser behind
// internal/kube/nodepool, kept apart as a leaf package (it links config and
// the standard library only) so that its fuzz target links a small program:
// `go test -fuzz` instruments every linked package for coverage, and
// nodepool links the Kubernetes API types through internal/kube/demand (see
// docs/reliability.md, the fuzz campaign).
package poolspec

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/tide-project/tide/internal/config"
)

// PoolLabel is the label every node of a pool carries, valued with the
// pool's name; it links a Node to its NodePool. It equals
// demand.PoolLabel.
const PoolLabel = "tide.dev/pool"

// Taint effects a pool's node taint may have (those of demand).
const (
	NoSchedule       = "NoSchedule"
	PreferNoSchedule = "PreferNoSchedule"
	NoExecute        = "NoExecute"
)

// Taint is a taint put on every node of a pool; it converts to demand.Taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Spec is a NodePool spec read and validated: the tide pool configuration
// and the template of its nodes.
type Spec struct {
	// Config is the pool as tide's YAML config would give it (Name is the
	// NodePool's name).
	Config config.Pool
	// Labels are put on every node; they always hold PoolLabel=<name>.
	Labels map[string]string
	// Taints are put on every node, sorted by key then effect.
	Taints []Taint
	// Join says how the machines of a provider other than kwok join the
	// cluster (spec.node_join).
	Join Join
}

// Join modes of a NodePool's machines (spec.node_join.mode).
const (
	// JoinAgent: the machine runs tide's Node agent (`tide kube node`),
	// which registers a Node and runs no containers. The default.
	JoinAgent = "agent"
	// JoinKubelet: the machine runs a container runtime and a real kubelet
	// that joins by TLS bootstrap with a bootstrap token minted for it.
	JoinKubelet = "kubelet"
)

// Join is spec.node_join: how a machine joins, and, in kubelet mode, what
// it runs (paths on the machine; empty fields take the machine's
// defaults, see nodeagent.Kubelet).
type Join struct {
	Mode string `json:"mode,omitempty"`
	// Kubelet, Containerd and Ctr are the executables (default: found on
	// the machine's PATH); CNIBinDir holds the CNI plugins.
	Kubelet    string `json:"kubelet,omitempty"`
	Containerd string `json:"containerd,omitempty"`
	Ctr        string `json:"ctr,omitempty"`
	CNIBinDir  string `json:"cni_bin_dir,omitempty"`
	// SandboxImage is the pod sandbox (pause) image; Images are image
	// tarballs (docker-archive) the machine imports before its kubelet
	// starts (machines that reach no registry).
	SandboxImage string   `json:"sandbox_image,omitempty"`
	Images       []string `json:"images,omitempty"`
	// PodSubnet is an IPv4 /16 each machine's pods get a /24 of.
	PodSubnet string `json:"pod_subnet,omitempty"`
	// TokenTTL is the lifetime of a machine's bootstrap token, e.g. "15m"
	// (default 15m, at most 24h); it is deleted with the machine anyway.
	TokenTTL string `json:"token_ttl,omitempty"`
	// UserData is what a machine that boots from user data (aws) gets:
	// UserDataTide (default), the join document that `tide worker
	// --bootstrap` runs containerd and the kubelet from,
	// UserDataKubeadm, a script running `kubeadm join` with the
	// machine's token (an image with kubeadm, a kubelet and a runtime),
	// or UserDataEKS, nodeadm's NodeConfig for an EKS node (an EKS AMI,
	// AL2023: the instance role authenticates, no token).
	UserData string `json:"user_data,omitempty"`
	// EKS is the cluster a UserDataEKS machine joins.
	EKS *EKS `json:"eks,omitempty"`
}

// User data formats of spec.node_join.user_data.
const (
	UserDataTide    = "tide"
	UserDataKubeadm = "kubeadm"
	UserDataEKS     = "eks"
)

// EKS is spec.node_join.eks: the coordinates of an EKS cluster, as `aws eks
// describe-cluster` gives them, that nodeadm's NodeConfig needs.
type EKS struct {
	// Cluster is the EKS cluster's name.
	Cluster string `json:"cluster,omitempty"`
	// APIServerEndpoint is its apiserver's URL (https://...eks.amazonaws.com).
	APIServerEndpoint string `json:"api_server_endpoint,omitempty"`
	// CertificateAuthority is its CA as describe-cluster gives it
	// (certificateAuthority.data: the PEM, base64-encoded). Empty: tide
	// kube's --node-ca, else the cluster's kube-root-ca.crt.
	CertificateAuthority string `json:"certificate_authority,omitempty"`
	// ServiceCIDR is the cluster's service CIDR (kubernetesNetworkConfig.
	// serviceIpv4Cidr); nodeadm derives the cluster DNS address from it.
	ServiceCIDR string `json:"service_cidr,omitempty"`
}

// CA returns the PEM of CertificateAuthority (nil when unset).
func (e EKS) CA() []byte {
	b, _ := base64.StdEncoding.DecodeString(e.CertificateAuthority)
	return b
}

// eksCluster is an EKS cluster's name: letters, digits, '-' and '_', 1 to
// 100 characters, starting with a letter or digit.
var eksCluster = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$`)

// validate checks spec.node_join.eks.
func (e EKS) validate() error {
	var errs []error
	const f = "spec.node_join.eks."
	switch {
	case e.Cluster == "":
		errs = append(errs, errors.New(f+"cluster: required (the EKS cluster's name)"))
	case !eksCluster.MatchString(e.Cluster):
		errs = append(errs, fmt.Errorf(f+"cluster: %q is not an EKS cluster name (letters, digits, '-', '_', at most 100)", e.Cluster))
	}
	if e.APIServerEndpoint == "" {
		errs = append(errs, errors.New(f+"api_server_endpoint: required (the cluster's endpoint, https://...)"))
	} else if u, err := url.Parse(e.APIServerEndpoint); err != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		errs = append(errs, fmt.Errorf(f+"api_server_endpoint: %q: want https://host[:port]", e.APIServerEndpoint))
	}
	if e.CertificateAuthority != "" {
		if err := checkCA(e.CertificateAuthority); err != nil {
			errs = append(errs, fmt.Errorf(f+"certificate_authority: %w", err))
		}
	}
	if e.ServiceCIDR == "" {
		errs = append(errs, errors.New(f+"service_cidr: required (the cluster's service CIDR, e.g. 10.100.0.0/16)"))
	} else if p, err := netip.ParsePrefix(e.ServiceCIDR); err != nil || p.Masked() != p {
		errs = append(errs, fmt.Errorf(f+"service_cidr: %q: want a CIDR such as 10.100.0.0/16", e.ServiceCIDR))
	}
	return errors.Join(errs...)
}

// checkCA checks that s is base64 of PEM certificates.
func checkCA(s string) error {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("not base64 (want the PEM base64-encoded, as describe-cluster gives it): %w", err)
	}
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("a PEM %s block, want CERTIFICATE", block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("certificate %d: %w", n+1, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificate in it")
	}
	return nil
}

// TokenLifetime returns TokenTTL parsed (15 minutes when unset).
func (j Join) TokenLifetime() time.Duration {
	d, err := time.ParseDuration(j.TokenTTL)
	if err != nil || d <= 0 {
		return 15 * time.Minute
	}
	return d
}

// validate checks spec.node_join.
func (j Join) validate(provType string) error {
	var errs []error
	switch j.Mode {
	case "", JoinAgent, JoinKubelet:
	default:
		errs = append(errs, fmt.Errorf("spec.node_join.mode: %q (want %s or %s)", j.Mode, JoinAgent, JoinKubelet))
	}
	if j.Mode != JoinKubelet {
		if j.Kubelet+j.Containerd+j.Ctr+j.CNIBinDir+j.SandboxImage+j.PodSubnet+j.TokenTTL+j.UserData != "" || len(j.Images) > 0 || j.EKS != nil {
			errs = append(errs, fmt.Errorf("spec.node_join: only mode %s takes kubelet settings", JoinKubelet))
		}
		return errors.Join(errs...)
	}
	if j.PodSubnet != "" {
		if p, err := netip.ParsePrefix(j.PodSubnet); err != nil || !p.Addr().Is4() || p.Bits() != 16 || p.Masked() != p {
			errs = append(errs, fmt.Errorf("spec.node_join.pod_subnet: %q: want an IPv4 /16 such as 10.244.0.0/16", j.PodSubnet))
		}
	}
	if j.TokenTTL != "" {
		if d, err := time.ParseDuration(j.TokenTTL); err != nil || d < time.Minute || d > 24*time.Hour {
			errs = append(errs, fmt.Errorf("spec.node_join.token_ttl: %q: want a duration from 1m to 24h", j.TokenTTL))
		}
	}
	switch j.UserData {
	case "", UserDataTide:
	case UserDataKubeadm, UserDataEKS:
		if provType != "aws" {
			errs = append(errs, fmt.Errorf("spec.node_join.user_data: %s is for machines that boot from user data (aws), not %s", j.UserData, provType))
		}
	default:
		errs = append(errs, fmt.Errorf("spec.node_join.user_data: %q (want %s, %s or %s)", j.UserData, UserDataTide, UserDataKubeadm, UserDataEKS))
	}
	if j.UserData == UserDataEKS {
		if j.EKS == nil {
			errs = append(errs, errors.New("spec.node_join.eks: required with user_data eks (cluster, api_server_endpoint, service_cidr; certificate_authority)"))
		} else if err := j.EKS.validate(); err != nil {
			errs = append(errs, err)
		}
		for _, f := range []struct{ name, v string }{{"kubelet", j.Kubelet}, {"containerd", j.Containerd}, {"ctr", j.Ctr},
			{"cni_bin_dir", j.CNIBinDir}, {"sandbox_image", j.SandboxImage}, {"pod_subnet", j.PodSubnet}} {
			if f.v != "" {
				errs = append(errs, fmt.Errorf("spec.node_join.%s: not used with user_data eks (the EKS AMI's nodeadm runs containerd and the kubelet)", f.name))
			}
		}
		if len(j.Images) > 0 {
			errs = append(errs, errors.New("spec.node_join.images: not used with user_data eks (the EKS AMI's nodeadm runs containerd and the kubelet)"))
		}
		if j.TokenTTL != "" {
			errs = append(errs, errors.New("spec.node_join.token_ttl: not used with user_data eks (an EKS node authenticates with its instance role: no token is minted)"))
		}
	} else if j.EKS != nil {
		errs = append(errs, fmt.Errorf("spec.node_join.eks: only user_data %s takes it", UserDataEKS))
	}
	for i, im := range j.Images {
		if !strings.HasPrefix(im, "/") {
			errs = append(errs, fmt.Errorf("spec.node_join.images[%d]: %q: want an absolute path", i, im))
		}
	}
	return errors.Join(errs...)
}

// kubeOnly are the spec fields that are not part of tide's pool config.
type kubeOnly struct {
	NodeLabels map[string]string `json:"node_labels,omitempty"`
	NodeTaints []Taint           `json:"node_taints,omitempty"`
	NodeJoin   *Join             `json:"node_join,omitempty"`
}

// qualifiedName is a label or taint key: an optional DNS subdomain prefix
// and a name of at most 63 characters.
var (
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	dnsSub      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	labelValue  = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
	errNotKeyed = errors.New("must be a qualified name ([prefix/]name, name of at most 63 letters, digits, '-', '_', '.')")
)

func validKey(k string) bool {
	prefix, name, ok := strings.Cut(k, "/")
	if !ok {
		return labelName.MatchString(k)
	}
	return dnsSub.MatchString(prefix) && labelName.MatchString(name)
}

// Parse reads the spec (JSON, as the apiserver stores it) of the NodePool
// called name. Every error names its field under "spec.".
func Parse(name string, spec []byte) (Spec, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return Spec{}, fmt.Errorf("spec: %w", err)
	}
	if fields == nil {
		return Spec{}, errors.New("spec: must be an object")
	}
	var ko kubeOnly
	koRaw, _ := json.Marshal(map[string]json.RawMessage{"node_labels": orNull(fields["node_labels"]),
		"node_taints": orNull(fields["node_taints"]), "node_join": orNull(fields["node_join"])})
	kdec := json.NewDecoder(bytes.NewReader(koRaw))
	kdec.DisallowUnknownFields()
	if err := kdec.Decode(&ko); err != nil {
		return Spec{}, fmt.Errorf("spec: %w", err)
	}
	delete(fields, "node_labels")
	delete(fields, "node_taints")
	delete(fields, "node_join")
	if _, ok := fields["selector"]; ok {
		return Spec{}, errors.New("spec.selector: not used on Kubernetes (pods choose nodes by node_labels and node_taints)")
	}
	nameJSON, _ := json.Marshal(name)
	fields["name"] = nameJSON
	pool, _ := json.Marshal(fields)
	file, err := config.Parse("spec", []byte(`{"pools":[`+string(pool)+`]}`))
	if err != nil {
		return Spec{}, rewrite(err, name)
	}
	out := Spec{Config: file.Pools[0], Labels: map[string]string{PoolLabel: name}}
	var errs []error
	if ko.NodeJoin != nil {
		out.Join = *ko.NodeJoin
		if err := out.Join.validate(out.Config.Provider.Type); err != nil {
			errs = append(errs, err)
		}
	}
	for k, v := range ko.NodeLabels {
		switch {
		case !validKey(k):
			errs = append(errs, fmt.Errorf("spec.node_labels: key %q %w", k, errNotKeyed))
		case !labelValue.MatchString(v):
			errs = append(errs, fmt.Errorf("spec.node_labels.%s: value %q is not a label value (at most 63 letters, digits, '-', '_', '.')", k, v))
		case k == PoolLabel && v != name:
			errs = append(errs, fmt.Errorf("spec.node_labels.%s: is set by tide to the pool's name %q", k, name))
		default:
			out.Labels[k] = v
		}
	}
	if out.Join.Mode == JoinKubelet {
		for _, k := range sortedKeys(ko.NodeLabels) {
			if validKey(k) && !kubeletMaySet(k) {
				errs = append(errs, fmt.Errorf("spec.node_labels: key %q: a kubelet may not register its Node with labels of the kubernetes.io or k8s.io namespaces "+
					"other than the well-known ones and those under node.kubernetes.io/ and kubelet.kubernetes.io/ (it refuses to start); use another prefix", k))
			}
		}
	}
	seen := map[string]bool{}
	for i, t := range ko.NodeTaints {
		switch {
		case !validKey(t.Key):
			errs = append(errs, fmt.Errorf("spec.node_taints[%d].key: %q %w", i, t.Key, errNotKeyed))
		case !labelValue.MatchString(t.Value):
			errs = append(errs, fmt.Errorf("spec.node_taints[%d].value: %q is not a label value", i, t.Value))
		case t.Effect != NoSchedule && t.Effect != PreferNoSchedule && t.Effect != NoExecute:
			errs = append(errs, fmt.Errorf("spec.node_taints[%d].effect: %q (want NoSchedule, PreferNoSchedule or NoExecute)", i, t.Effect))
		case seen[t.Key+":"+t.Effect]:
			errs = append(errs, fmt.Errorf("spec.node_taints[%d]: duplicate taint %s:%s", i, t.Key, t.Effect))
		default:
			seen[t.Key+":"+t.Effect] = true
			out.Taints = append(out.Taints, t)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Spec{}, err
	}
	sort.Slice(out.Taints, func(i, j int) bool {
		if out.Taints[i].Key != out.Taints[j].Key {
			return out.Taints[i].Key < out.Taints[j].Key
		}
		return out.Taints[i].Effect < out.Taints[j].Effect
	})
	return out, nil
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// rewrite turns config's "spec: pool "x": field: ..." into "spec.field: ...".
func rewrite(err error, name string) error {
	prefix := fmt.Sprintf("spec: pool %q: ", name)
	var parts []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	} else {
		parts = []error{err}
	}
	out := make([]error, len(parts))
	for i, e := range parts {
		msg := e.Error()
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			out[i] = fmt.Errorf("spec.%s", rest)
		} else {
			out[i] = e
		}
	}
	return errors.Join(out...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// kubeletLabels are the labels of the kubernetes.io and k8s.io namespaces a
// kubelet may register its Node with (--node-labels), besides those under
// node.kubernetes.io/ and kubelet.kubernetes.io/.
var kubeletLabels = map[string]bool{
	"kubernetes.io/hostname": true, "kubernetes.io/arch": true, "kubernetes.io/os": true,
	"beta.kubernetes.io/arch": true, "beta.kubernetes.io/os": true, "beta.kubernetes.io/instance-type": true,
	"node.kubernetes.io/instance-type": true, "topology.kubernetes.io/region": true, "topology.kubernetes.io/zone": true,
	"failure-domain.beta.kubernetes.io/region": true, "failure-domain.beta.kubernetes.io/zone": true,
}

// kubeletMaySet reports whether a kubelet may set label key on its Node:
// a kubelet refuses to start with --node-labels of the kubernetes.io or
// k8s.io namespaces (and their subdomains) other than kubeletLabels and
// those under node.kubernetes.io/ and kubelet.kubernetes.io/.
func kubeletMaySet(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	in := func(ns string) bool { return prefix == ns || strings.HasSuffix(prefix, "."+ns) }
	if !in("kubernetes.io") && !in("k8s.io") {
		return true
	}
	return kubeletLabels[key] || in("node.kubernetes.io") || in("kubelet.kubernetes.io")
}
