// Package kubeapi is the small Kubernetes API client tide's Kubernetes
// mode uses so far: Nodes, Pods (list, evict), PodDisruptionBudgets and
// ConfigMaps over HTTPS with a bearer token read from a kubeconfig. Errors
// that callers tell apart wrap ErrNotFound, ErrExists and ErrConflict.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// Errors callers tell apart.
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a create found the object already there.
	ErrExists = errors.New("already exists")
	// ErrConflict: an update carried an old resourceVersion.
	ErrConflict = errors.New("conflict (object changed)")
	// ErrTooManyRequests: an eviction was refused by a PodDisruptionBudget.
	ErrTooManyRequests = errors.New("too many requests (disruption budget)")
)

// REST is the client.
type REST struct {
	server string
	token  string
	http   *http.Client
}

// kubeconfig is what REST reads of a kubeconfig file: the current context's
// server, CA and bearer token.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token string `json:"token"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

// NewREST reads a kubeconfig (token authentication) and returns a client.
func NewREST(path string) (*REST, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	var clusterName, userName string
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			clusterName, userName = c.Context.Cluster, c.Context.User
		}
	}
	r := &REST{}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, c := range kc.Clusters {
		if c.Name != clusterName {
			continue
		}
		r.server = c.Cluster.Server
		tlsCfg.InsecureSkipVerify = c.Cluster.InsecureSkipTLSVerify // #nosec G402 -- as the kubeconfig says
		if c.Cluster.CertificateAuthorityData != "" {
			pem, err := base64.StdEncoding.DecodeString(c.Cluster.CertificateAuthorityData)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: certificate-authority-data: %w", path, err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			tlsCfg.RootCAs = pool
		}
	}
	for _, u := range kc.Users {
		if u.Name == userName {
			r.token = u.User.Token
		}
	}
	if r.server == "" {
		return nil, fmt.Errorf("kubeconfig %s: current-context %q names no cluster with a server", path, kc.CurrentContext)
	}
	r.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	return r, nil
}

// do sends one request; out, when not nil, receives the decoded answer.
func (r *REST) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		js, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.server+path, body)
	if err != nil {
		return err
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, ErrNotFound)
	case resp.StatusCode == http.StatusConflict && method == http.MethodPost:
		return fmt.Errorf("%s %s: %w", method, path, ErrExists)
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%s %s: %w", method, path, ErrConflict)
	case resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("%s %s: %w: %s", method, path, ErrTooManyRequests, bytes.TrimSpace(data))
	case resp.StatusCode >= 300:
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// CreateNode creates a Node.
func (r *REST) CreateNode(ctx context.Context, n *corev1.Node) (*corev1.Node, error) {
	n.APIVersion, n.Kind = "v1", "Node"
	var out corev1.Node
	return &out, r.do(ctx, http.MethodPost, "/api/v1/nodes", n, &out)
}

// GetNode reads a Node.
func (r *REST) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	var out corev1.Node
	return &out, r.do(ctx, http.MethodGet, "/api/v1/nodes/"+url.PathEscape(name), nil, &out)
}

// UpdateNode writes a Node (spec and metadata) if its resourceVersion is current.
func (r *REST) UpdateNode(ctx context.Context, n *corev1.Node) (*corev1.Node, error) {
	n.APIVersion, n.Kind = "v1", "Node"
	var out corev1.Node
	return &out, r.do(ctx, http.MethodPut, "/api/v1/nodes/"+url.PathEscape(n.Name), n, &out)
}

// DeleteNode deletes a Node.
func (r *REST) DeleteNode(ctx context.Context, name string) error {
	return r.do(ctx, http.MethodDelete, "/api/v1/nodes/"+url.PathEscape(name), nil, nil)
}

// ListNodes lists the Nodes matching a label selector.
func (r *REST) ListNodes(ctx context.Context, selector string) ([]corev1.Node, error) {
	var out corev1.NodeList
	err := r.do(ctx, http.MethodGet, "/api/v1/nodes?labelSelector="+url.QueryEscape(selector), nil, &out)
	return out.Items, err
}

// GetConfigMap reads a ConfigMap.
func (r *REST) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	var out corev1.ConfigMap
	return &out, r.do(ctx, http.MethodGet, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/configmaps/"+url.PathEscape(name), nil, &out)
}

// CreateConfigMap creates a ConfigMap.
func (r *REST) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	cm.APIVersion, cm.Kind = "v1", "ConfigMap"
	var out corev1.ConfigMap
	return &out, r.do(ctx, http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(cm.Namespace)+"/configmaps", cm, &out)
}

// UpdateConfigMap writes a ConfigMap if its resourceVersion is current.
func (r *REST) UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	cm.APIVersion, cm.Kind = "v1", "ConfigMap"
	var out corev1.ConfigMap
	return &out, r.do(ctx, http.MethodPut, "/api/v1/namespaces/"+url.PathEscape(cm.Namespace)+"/configmaps/"+url.PathEscape(cm.Name), cm, &out)
}

// ListPods lists the pods of every namespace matching a field selector
// (empty: all).
func (r *REST) ListPods(ctx context.Context, fieldSelector string) ([]corev1.Pod, error) {
	var out corev1.PodList
	err := r.do(ctx, http.MethodGet, "/api/v1/pods?fieldSelector="+url.QueryEscape(fieldSelector), nil, &out)
	return out.Items, err
}

// Evict asks the Eviction API to evict a pod; a PodDisruptionBudget that
// forbids it answers ErrTooManyRequests.
func (r *REST) Evict(ctx context.Context, namespace, name string) error {
	body := map[string]any{"apiVersion": "policy/v1", "kind": "Eviction",
		"metadata": map[string]string{"name": name, "namespace": namespace}}
	return r.do(ctx, http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name)+"/eviction", body, nil)
}

// ListPDBs lists the PodDisruptionBudgets of every namespace.
func (r *REST) ListPDBs(ctx context.Context) ([]policyv1.PodDisruptionBudget, error) {
	var out policyv1.PodDisruptionBudgetList
	err := r.do(ctx, http.MethodGet, "/apis/policy/v1/poddisruptionbudgets", nil, &out)
	return out.Items, err
}
