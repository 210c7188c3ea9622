package decide

import (
	"fmt"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/policy"
)

// GangPlan is what one decision does for one waiting gang: its instances
// are bought for all at once in this purchase, or none of them is.
type GangPlan struct {
	Gang      string             `json:"gang"`
	Instances int                `json:"instances"`
	Requests  capacity.Resources `json:"requests"`
	Priority  int                `json:"priority,omitempty"`
	// Bought is set when the gang is in the backlog the policy bought for
	// and the decision raised the desired count: its nodes come in this
	// one purchase (Launch). Otherwise Why says why it waits.
	Bought bool   `json:"bought"`
	Why    string `json:"why,omitempty"`
}

// gangPlans lists the gangs of in's pending work and what decision d does
// for them under cfg.
func gangPlans(cfg policy.Config, in policy.Input, d policy.Decision, desired int) []GangPlan {
	var out []GangPlan
	for _, p := range in.Pressure.Pending {
		if p.Gang != "" {
			out = append(out, GangPlan{Gang: p.Gang, Instances: p.Count, Requests: p.Requests, Priority: p.Priority})
		}
	}
	if len(out) == 0 {
		return nil
	}
	kept := map[string]bool{}
	backlog := d.Backlog
	if backlog == nil {
		backlog = in.Pressure.Pending
	}
	for _, p := range backlog {
		kept[p.Gang] = true
	}
	// Within the max, a gang left out of the backlog was left out by the
	// pool's limits.
	var withinMax map[string]bool
	if !cfg.Limits.IsZero() {
		withinMax = map[string]bool{}
		for _, p := range policy.Backlog(cfg, in) {
			withinMax[p.Gang] = true
		}
	}
	for i := range out {
		g := &out[i]
		switch {
		case cfg.ExpendableBelow != nil && g.Priority < *cfg.ExpendableBelow:
			g.Why = fmt.Sprintf("priority %d is below the pool's expendable_below %d: never scales up", g.Priority, *cfg.ExpendableBelow)
		case !kept[g.Gang] && withinMax[g.Gang]:
			if never := policy.GangNeverFits(cfg, in.Now, in.State, policy.GangGroups(in.Pressure.Pending, g.Gang)); never != "" {
				g.Why = "can never fit within the pool's limits, not even in an empty pool: " + never
			} else {
				g.Why = "does not fit within the pool's limits after work of higher priority"
			}
		case !kept[g.Gang] && !policy.GangFitsMax(cfg, policy.GangGroups(in.Pressure.Pending, g.Gang)):
			g.Why = fmt.Sprintf("can never fit: not even an empty pool of the pool's max (%d nodes) holds it", cfg.Nodes.Max)
		case !kept[g.Gang]:
			g.Why = fmt.Sprintf("does not fit the room the pool's max (%d nodes) leaves after work of higher priority", cfg.Nodes.Max)
		case d.Desired <= desired:
			g.Why = "no scale-up in this decision (" + d.Reason.Code + ")"
		default:
			g.Bought = true
		}
	}
	return out
}
