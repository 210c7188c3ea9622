package config

import (
	"time"

	"github.com/tide-project/tide/internal/policy"
	"github.com/tide-project/tide/internal/reconcile"
)

// ReconcileConfig returns the reconciler configuration of the pool, the one
// the live pool (tide up) and tide decide both run: its node spec, first-node
// protection, and the utilization policy's scale-down delay (deletion marks;
// the other policies drain excess nodes at once).
func (p *Pool) ReconcileConfig() reconcile.Config {
	var delay time.Duration
	if p.Scaling.Policy == policy.Utilization {
		delay = time.Duration(p.Scaling.ScaleDownDelay)
	}
	return reconcile.Config{Nodes: p.Nodes, ProtectFirstNode: p.Scaling.ProtectFirstNode, ScaleDownDelay: delay}
}
