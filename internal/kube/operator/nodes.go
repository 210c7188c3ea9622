package operator

import (
	"cmp"
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tide-project/tide/internal/kube/kwok"
)

// nodeIndex is the one place tide kube maps a pool's machines to their
// Nodes and back (the workload's inspection, cordons and drains, deletion
// marks, consolidation, the join check and the Node's removal with its
// machine). A Node is a machine's when, in this order:
//
//  1. it carries the label MachineLabel valued with the machine id (every
//     join tide renders puts it on: agent, kubelet, kubeadm, eks);
//  2. its spec.providerID names the machine: tide://<type>/<id> (tide's
//     agent and kubelet joins), kwok://<id>, or a cloud's own form the
//     pool's provider resolves (aws:///<zone>/<instance id>, set by nodeadm
//     on EKS and by the AWS cloud controller manager);
//  3. failing both, it is named as the machine's Node is named by default
//     (the machine id; the kwok provider's prefix and id).
//
// An EKS Node is named after its instance's private DNS name, so only 1
// and 2 find it. The index is rebuilt from the pool's Nodes (those with
// the pool label) at every pass; a Node that registered since is found by
// name at once, by label or providerID from the next pass (or through
// find).
type nodeIndex struct {
	// name is a machine's default Node name.
	name func(machineID string) string
	// cloud resolves a providerID the pool's provider knows (nil: none).
	cloud func(providerID string) (string, bool)

	mu      sync.Mutex
	node    map[string]string // machine id → Node name
	machine map[string]string // Node name → machine id
}

// providerResolver is a provider that knows the providerIDs its cloud
// gives the Nodes of its machines (the aws provider).
type providerResolver interface {
	MachineOfProviderID(providerID string) (string, bool)
}

func newNodeIndex(name func(string) string, prov any) *nodeIndex {
	x := &nodeIndex{name: name, node: map[string]string{}, machine: map[string]string{}}
	if r, ok := prov.(providerResolver); ok {
		x.cloud = r.MachineOfProviderID
	}
	return x
}

// machineOf says which machine Node n is (label, then providerID).
func (x *nodeIndex) machineOf(n *corev1.Node) (string, bool) {
	if id := n.Labels[MachineLabel]; id != "" {
		return id, true
	}
	pid := n.Spec.ProviderID
	if rest, ok := strings.CutPrefix(pid, "tide://"); ok {
		if _, id, ok := strings.Cut(rest, "/"); ok && id != "" {
			return id, true
		}
	}
	if id, ok := strings.CutPrefix(pid, kwok.ProviderIDPrefix); ok && id != "" {
		return id, true
	}
	if x.cloud != nil && pid != "" {
		return x.cloud(pid)
	}
	return "", false
}

// refresh rebuilds the index from the pool's Nodes. When two Nodes claim
// one machine, one not being deleted wins, then the first by name.
func (x *nodeIndex) refresh(nodes []*corev1.Node) {
	node, machine := make(map[string]string, len(nodes)), make(map[string]string, len(nodes))
	winner := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		id, ok := x.machineOf(n)
		if !ok {
			continue
		}
		if w := winner[id]; w != nil && !before(n, w) {
			continue
		} else if w != nil {
			delete(machine, w.Name)
		}
		winner[id], node[id], machine[n.Name] = n, n.Name, id
	}
	x.mu.Lock()
	x.node, x.machine = node, machine
	x.mu.Unlock()
}

// before orders two Nodes claiming one machine: not being deleted first,
// then by name.
func before(a, b *corev1.Node) bool {
	if (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil) {
		return a.DeletionTimestamp == nil
	}
	return a.Name < b.Name
}

// Name returns the name of machine id's Node: the indexed one, else the
// default name (which may not exist).
func (x *nodeIndex) Name(id string) string {
	if name, ok := x.indexed(id); ok {
		return name
	}
	return x.name(id)
}

func (x *nodeIndex) indexed(id string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	name, ok := x.node[id]
	return name, ok
}

// Machine returns the machine of the Node called name: the indexed one,
// else ok false.
func (x *nodeIndex) Machine(name string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	id, ok := x.machine[name]
	return id, ok
}

// find is Name for the callers that must not miss a Node that registered
// since the last refresh (the join check, the Node's removal): a machine
// not indexed is looked up by its label in c (the informer cache) before
// the default name is taken. Found, it is indexed.
func (x *nodeIndex) find(ctx context.Context, c client.Reader, id string) string {
	if name, ok := x.indexed(id); ok {
		return name
	}
	if c != nil && validLabelValue(id) {
		var nl corev1.NodeList
		if err := c.List(ctx, &nl, client.MatchingLabels{MachineLabel: id}); err == nil && len(nl.Items) > 0 {
			name := slices.MinFunc(nl.Items, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) }).Name
			x.mu.Lock()
			x.node[id], x.machine[name] = name, id
			x.mu.Unlock()
			return name
		}
	}
	return x.name(id)
}

var labelValueRE = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)

// validLabelValue reports whether s may be a label's value (a machine id
// longer than 63 characters, from a long pool name, is not: its Node is
// found by providerID or name only).
func validLabelValue(s string) bool { return s != "" && labelValueRE.MatchString(s) }

// machineLabels returns labels with MachineLabel set to the machine id
// (when the id may be a label value).
func machineLabels(labels map[string]string, machineID string) map[string]string {
	if validLabelValue(machineID) {
		labels[MachineLabel] = machineID
	}
	return labels
}
