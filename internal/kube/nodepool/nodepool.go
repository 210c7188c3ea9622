// Package nodepool reads the spec of a NodePool (tide.dev/v1alpha1), the
// Kubernetes form of one tide pool, into the very config.Pool that
// `tide head --config` builds its pools from, plus the labels and taints the
// pool's nodes carry. The spec is the pool block of tide's YAML config (same
// field names, defaults and validation) without the selector: on Kubernetes,
// pods choose nodes through the pool's node labels and taints.
package nodepool

import (
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/kube/poolspec"
)

// Group, Version and Kind name the custom resource.
const (
	Group    = "tide.dev"
	Version  = "v1alpha1"
	Kind     = "NodePool"
	Resource = "nodepools"
)

// PoolLabel is the label every node of a pool carries, valued with the
// pool's name; it links a Node to its NodePool.
const PoolLabel = demand.PoolLabel

// Taint effects a pool's node taint may have.
const (
	NoSchedule       = demand.NoSchedule
	PreferNoSchedule = demand.PreferNoSchedule
	NoExecute        = demand.NoExecute
)

// Taint is a taint put on every node of a pool.
type Taint = demand.Taint

// Pool is a NodePool read and validated: the tide pool configuration and the
// template of its nodes.
type Pool struct {
	// Config is the pool as tide's YAML config would give it (Name is the
	// NodePool's name).
	Config config.Pool
	// Labels are put on every node; they always hold PoolLabel=<name>.
	Labels map[string]string
	// Taints are put on every node, sorted by key then effect.
	Taints []Taint
	// Join is how the pool's machines join (spec.node_join).
	Join poolspec.Join
}

// Parse reads the spec (JSON, as the apiserver stores it) of the NodePool
// called name. Every error names its field under "spec.". The parser is
// poolspec.Parse.
func Parse(name string, spec []byte) (Pool, error) {
	s, err := poolspec.Parse(name, spec)
	if err != nil {
		return Pool{}, err
	}
	p := Pool{Config: s.Config, Labels: s.Labels, Join: s.Join}
	for _, t := range s.Taints {
		p.Taints = append(p.Taints, Taint(t))
	}
	return p, nil
}

// Demand returns the view of the pool that demand matching needs.
func (p Pool) Demand() demand.Pool {
	return demand.Pool{Name: p.Config.Name, Labels: p.Labels, Taints: p.Taints, Offerings: p.Config.Offerings,
		Weight: p.Config.Weight, Limits: p.Config.Limits.Limits}
}
