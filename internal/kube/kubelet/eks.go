package kubelet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"net/netip"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// NodeConfig's group, version and kind (nodeadm, the node agent of the EKS
// AMIs from Amazon Linux 2023 on), and the media type of the user data
// part that carries one.
const (
	EKSNodeConfigAPIVersion = "node.eks.aws/v1alpha1"
	EKSNodeConfigKind       = "NodeConfig"
	EKSNodeConfigMediaType  = "application/node.eks.aws"
)

// eksBoundary separates the parts of the user data.
const eksBoundary = "tide-eks-nodeconfig"

// EKSNode is what an EKS node's user data says: the cluster (as `aws eks
// describe-cluster` gives it) and the Node's labels and taints. There is
// no credential: on EKS a node authenticates with its instance role (an
// access entry or aws-auth mapping of type EC2_LINUX), so nothing is minted
// for it and nothing is revoked.
type EKSNode struct {
	// Machine and Pool name the machine in the user data's comment.
	Machine, Pool string
	// Cluster is the EKS cluster's name, Endpoint its apiserver's URL.
	Cluster, Endpoint string
	// CA is the cluster's CA (PEM).
	CA []byte
	// ServiceCIDR is the cluster's service CIDR (nodeadm derives the
	// cluster DNS address from it).
	ServiceCIDR string
	// Labels and Taints are the Node's (--node-labels,
	// --register-with-taints).
	Labels map[string]string
	Taints []corev1.Taint
}

// EKSNodeConfig is the part of nodeadm's NodeConfig (node.eks.aws/v1alpha1)
// tide writes and reads back: spec.cluster and spec.kubelet.
type EKSNodeConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Cluster struct {
			Name              string `json:"name"`
			APIServerEndpoint string `json:"apiServerEndpoint"`
			// CertificateAuthority is the CA's PEM; it is base64 in the
			// document ([]byte in JSON), as nodeadm reads it.
			CertificateAuthority []byte `json:"certificateAuthority"`
			CIDR                 string `json:"cidr"`
		} `json:"cluster"`
		Kubelet struct {
			Config map[string]any `json:"config,omitempty"`
			Flags  []string       `json:"flags,omitempty"`
		} `json:"kubelet"`
	} `json:"spec"`
}

// Flag returns the value of kubelet flag --name in spec.kubelet.flags.
func (c *EKSNodeConfig) Flag(name string) (string, bool) {
	for _, f := range c.Spec.Kubelet.Flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// validate checks what nodeadm requires of spec.cluster, and the rest tide
// relies on.
func (c *EKSNodeConfig) validate() error {
	cl := c.Spec.Cluster
	var errs []error
	if c.APIVersion != EKSNodeConfigAPIVersion || c.Kind != EKSNodeConfigKind {
		errs = append(errs, fmt.Errorf("%s %s, want %s %s", c.APIVersion, c.Kind, EKSNodeConfigAPIVersion, EKSNodeConfigKind))
	}
	if cl.Name == "" {
		errs = append(errs, errors.New("spec.cluster.name: empty"))
	}
	if u, err := url.Parse(cl.APIServerEndpoint); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("spec.cluster.apiServerEndpoint: %q: want https://host", cl.APIServerEndpoint))
	}
	if len(cl.CertificateAuthority) == 0 {
		errs = append(errs, errors.New("spec.cluster.certificateAuthority: empty"))
	} else if _, err := CACertHash(cl.CertificateAuthority); err != nil {
		errs = append(errs, fmt.Errorf("spec.cluster.certificateAuthority: %w", err))
	}
	if _, err := netip.ParsePrefix(cl.CIDR); err != nil {
		errs = append(errs, fmt.Errorf("spec.cluster.cidr: %q: %w", cl.CIDR, err))
	}
	return errors.Join(errs...)
}

// EKSUserData renders an EKS node's user data: a MIME multipart document
// (what Amazon Linux 2023's cloud-init and nodeadm read) whose one part,
// of type application/node.eks.aws, is a NodeConfig with the cluster's
// name, endpoint, CA and service CIDR, and kubelet flags that register the
// Node with the pool's labels (--node-labels, the machine label among
// them) and taints (--register-with-taints). nodeadm names the Node after
// the instance's private DNS name and sets its providerID to
// aws:///<zone>/<instance id>.
func EKSUserData(n EKSNode) ([]byte, error) {
	var c EKSNodeConfig
	c.APIVersion, c.Kind = EKSNodeConfigAPIVersion, EKSNodeConfigKind
	cl := &c.Spec.Cluster
	cl.Name, cl.APIServerEndpoint, cl.CertificateAuthority, cl.CIDR = n.Cluster, n.Endpoint, n.CA, n.ServiceCIDR
	if l := nodeLabels(n.Labels); l != "" {
		c.Spec.Kubelet.Flags = append(c.Spec.Kubelet.Flags, "--node-labels="+l)
	}
	if len(n.Taints) > 0 {
		c.Spec.Kubelet.Flags = append(c.Spec.Kubelet.Flags, "--register-with-taints="+nodeTaints(n.Taints))
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("eks user data: %w", err)
	}
	doc, err := yaml.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("eks user data: %w", err)
	}
	if bytes.Contains(doc, []byte("--"+eksBoundary)) {
		return nil, errors.New("eks user data: the NodeConfig holds the MIME boundary")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=%q\n\n", eksBoundary)
	fmt.Fprintf(&b, "--%s\nContent-Type: %s\n\n", eksBoundary, EKSNodeConfigMediaType)
	fmt.Fprintf(&b, "---\n# tide: machine %s of NodePool %s joins EKS cluster %s (nodeadm; the instance role authenticates it).\n",
		oneLine(n.Machine), oneLine(n.Pool), n.Cluster)
	b.Write(doc)
	fmt.Fprintf(&b, "\n--%s--\n", eksBoundary)
	return b.Bytes(), nil
}

// oneLine keeps a name on its comment line.
func oneLine(s string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(s) }

// ParseEKSUserData reads EKS user data back the way nodeadm does: a MIME
// multipart document whose parts of type application/node.eks.aws hold
// NodeConfigs. It returns the one NodeConfig (tide writes one), checked as
// EKSUserData checks it.
func ParseEKSUserData(data []byte) (*EKSNodeConfig, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("eks user data: not MIME: %w", err)
	}
	if v := msg.Header.Get("MIME-Version"); v != "1.0" {
		return nil, fmt.Errorf("eks user data: MIME-Version %q", v)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") {
		return nil, fmt.Errorf("eks user data: Content-Type %q is not multipart (%v)", msg.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	var out []*EKSNodeConfig
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("eks user data: %w", err)
		}
		pt, _, err := mime.ParseMediaType(part.Header.Get("Content-Type"))
		if err != nil || pt != EKSNodeConfigMediaType {
			continue
		}
		body, err := io.ReadAll(part)
		if err != nil {
			return nil, fmt.Errorf("eks user data: %w", err)
		}
		var c EKSNodeConfig
		if err := yaml.UnmarshalStrict(body, &c); err != nil {
			return nil, fmt.Errorf("eks user data: NodeConfig: %w", err)
		}
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("eks user data: %w", err)
		}
		out = append(out, &c)
	}
	if len(out) != 1 {
		return nil, fmt.Errorf("eks user data: %d parts of type %s, want 1", len(out), EKSNodeConfigMediaType)
	}
	return out[0], nil
}
