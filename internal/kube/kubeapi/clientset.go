package kubeapi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Clientset is the same API as REST on client-go (any rest.Config: a
// kubeconfig with any kind of credentials, or the in-cluster service
// account), with client-go's errors mapped to ErrNotFound, ErrExists,
// ErrConflict and ErrTooManyRequests. `tide kube` uses it.
type Clientset struct {
	cs kubernetes.Interface
}

// NewClientset wraps a client-go clientset.
func NewClientset(cs kubernetes.Interface) *Clientset { return &Clientset{cs: cs} }

// mapErr turns client-go's status errors into this package's.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%w: %v", ErrExists, err)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	case apierrors.IsTooManyRequests(err):
		return fmt.Errorf("%w: %v", ErrTooManyRequests, err)
	}
	return err
}

// CreateNode creates a Node.
func (c *Clientset) CreateNode(ctx context.Context, n *corev1.Node) (*corev1.Node, error) {
	out, err := c.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	return out, mapErr(err)
}

// GetNode reads a Node.
func (c *Clientset) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	out, err := c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	return out, mapErr(err)
}

// UpdateNode writes a Node if its resourceVersion is current.
func (c *Clientset) UpdateNode(ctx context.Context, n *corev1.Node) (*corev1.Node, error) {
	out, err := c.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return out, mapErr(err)
}

// DeleteNode deletes a Node.
func (c *Clientset) DeleteNode(ctx context.Context, name string) error {
	return mapErr(c.cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
}

// ListNodes lists the Nodes matching a label selector.
func (c *Clientset) ListNodes(ctx context.Context, selector string) ([]corev1.Node, error) {
	out, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, mapErr(err)
	}
	return out.Items, nil
}

// GetConfigMap reads a ConfigMap.
func (c *Clientset) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	out, err := c.cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	return out, mapErr(err)
}

// CreateConfigMap creates a ConfigMap.
func (c *Clientset) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	out, err := c.cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	return out, mapErr(err)
}

// UpdateConfigMap writes a ConfigMap if its resourceVersion is current.
func (c *Clientset) UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	out, err := c.cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return out, mapErr(err)
}

// ListPods lists the pods of every namespace matching a field selector.
func (c *Clientset) ListPods(ctx context.Context, fieldSelector string) ([]corev1.Pod, error) {
	out, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fieldSelector})
	if err != nil {
		return nil, mapErr(err)
	}
	return out.Items, nil
}

// Evict asks the Eviction API to evict a pod; a PodDisruptionBudget that
// forbids it answers ErrTooManyRequests.
func (c *Clientset) Evict(ctx context.Context, namespace, name string) error {
	return mapErr(c.cs.PolicyV1().Evictions(namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}))
}

// ListPDBs lists the PodDisruptionBudgets of every namespace.
func (c *Clientset) ListPDBs(ctx context.Context) ([]policyv1.PodDisruptionBudget, error) {
	out, err := c.cs.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, mapErr(err)
	}
	return out.Items, nil
}
