package kubelet

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/internal/kube/nodeagent"
)

// KubeadmJoinPath is where KubeadmUserData writes the machine's
// JoinConfiguration.
const KubeadmJoinPath = "/etc/tide/kubeadm-join.yaml"

// CACertHash is kubeadm's --discovery-token-ca-cert-hash of a PEM CA:
// "sha256:" and the hex SHA-256 of its certificate's SubjectPublicKeyInfo.
func CACertHash(caPEM []byte) (string, error) {
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return "", errors.New("CA: no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("CA: %w", err)
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// KubeadmUserData renders a kubelet-mode Join as the boot script of a
// machine whose image has kubeadm, a kubelet and a container runtime (a
// cloud instance): it writes a kubeadm JoinConfiguration (v1beta4: the
// bootstrap token, the apiserver, the CA's hash, the Node's name, labels,
// taints and providerID) and runs `kubeadm join` on it. Discovery needs the
// cluster-info ConfigMap in kube-public, signed for the token (kubeadm's
// clusters have it; the token must allow bootstrap signing). Without a CA
// the join skips its verification (unsafeSkipCAVerification).
func KubeadmUserData(j nodeagent.Join, pool string) ([]byte, error) {
	if j.Mode != nodeagent.ModeKubelet || !nodeagent.ValidBootstrapToken(j.Token) {
		return nil, errors.New("kubeadm user data: want a kubelet-mode join with a bootstrap token")
	}
	u, err := url.Parse(j.Server)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("kubeadm user data: server %q: want https://host:port", j.Server)
	}
	bt := map[string]any{"apiServerEndpoint": u.Host, "token": j.Token}
	if j.CA != "" {
		h, err := CACertHash([]byte(j.CA))
		if err != nil {
			return nil, fmt.Errorf("kubeadm user data: %w", err)
		}
		bt["caCertHashes"] = []string{h}
	} else {
		bt["unsafeSkipCAVerification"] = true
	}
	args := []map[string]string{{"name": "provider-id", "value": j.ProviderID}}
	if l := nodeLabels(j.Labels); l != "" {
		args = append(args, map[string]string{"name": "node-labels", "value": l})
	}
	taints := []map[string]string{}
	for _, t := range j.Taints {
		tm := map[string]string{"key": t.Key, "effect": string(t.Effect)}
		if t.Value != "" {
			tm["value"] = t.Value
		}
		taints = append(taints, tm)
	}
	cfg, err := yaml.Marshal(map[string]any{
		"apiVersion":       "kubeadm.k8s.io/v1beta4",
		"kind":             "JoinConfiguration",
		"discovery":        map[string]any{"bootstrapToken": bt, "tlsBootstrapToken": j.Token},
		"nodeRegistration": map[string]any{"name": j.Node, "taints": taints, "kubeletExtraArgs": args},
	})
	if err != nil {
		return nil, err
	}
	if strings.Contains(string(cfg), "TIDE_JOIN") {
		return nil, errors.New("kubeadm user data: the configuration holds the heredoc's end marker")
	}
	return []byte(fmt.Sprintf(`#!/bin/sh
# tide: machine %s joins NodePool %s as a kubelet Node (kubeadm join). Holds a join credential: user-data only.
set -eu
umask 077
mkdir -p /etc/tide
cat > %s <<'TIDE_JOIN'
%sTIDE_JOIN
exec kubeadm join --config %s
`, j.Node, pool, KubeadmJoinPath, cfg, KubeadmJoinPath)), nil
}
