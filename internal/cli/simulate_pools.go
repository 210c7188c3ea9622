package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/sim"
)

// poolsRow is one line of a multi-pool simulation: a policy under one
// routing, with the cluster's figures and the instances each pool got.
type poolsRow struct {
	Policy    string         `json:"policy"`
	Routing   string         `json:"routing"`
	Seed      uint64         `json:"seed"`
	Cost      float64        `json:"cost"`
	NodeHours float64        `json:"node_hours"`
	WaitP50   float64        `json:"wait_p50_s"`
	WaitP95   float64        `json:"wait_p95_s"`
	Machines  int            `json:"machines"`
	Routed    map[string]int `json:"routed"`
	// Cost per pool, by name.
	PoolCost   map[string]float64 `json:"pool_cost"`
	Unfinished int                `json:"unfinished"`
	// PoolUnfinished is each pool's instances not done at the end.
	PoolUnfinished map[string]int `json:"pool_unfinished"`
}

// runPoolsSim is `tide simulate --routing`: the config's pools replayed
// together (sim.RunPools), the trace routed by tide's routing, first-match
// routing, or both, under each policy asked for.
func runPoolsSim(cmd *cobra.Command, s Streams, tracePath, cfgPath, pol, routingMode, output string, seed uint64, skipBad bool) error {
	if cfgPath == "" {
		return badInput(errors.New("--routing needs --pool-config with the pools"))
	}
	modes := []string{routingMode}
	switch routingMode {
	case "both":
		modes = []string{sim.RoutingTide, sim.RoutingFirst}
	case sim.RoutingTide, sim.RoutingFirst:
	default:
		return badInput(fmt.Errorf("--routing: want tide, first or both, got %q", routingMode))
	}
	ps, err := sim.LoadPools(cfgPath)
	if err != nil {
		return badInput(err)
	}
	first := ps.Pools[0]
	names, err := simPolicies(pol, first)
	if err != nil {
		return badInput(err)
	}
	w, err := sim.ReadWorkload(tracePath, first, skipBad)
	if err != nil {
		return badInput(err)
	}
	var rows []poolsRow
	for _, name := range names {
		if why := sim.Applicable(first, w, name); why != "" {
			fmt.Fprintf(s.Err, "tide: %s: policy %s not applicable, not run: %s\n", tracePath, name, why)
			continue
		}
		for _, mode := range modes {
			r, err := sim.RunPools(cmd.Context(), ps, w, mode, sim.Options{Policy: name, Seed: seed})
			if err != nil {
				return fmt.Errorf("simulate %s (%s routing): %w", name, mode, err)
			}
			row := poolsRow{Policy: name, Routing: mode, Seed: seed, Cost: r.Total.Cost, NodeHours: r.Total.NodeHours,
				WaitP50: r.Total.WaitP50, WaitP95: r.Total.WaitP95, Machines: r.Total.Machines, Unfinished: r.Total.Unfinished,
				Routed: map[string]int{}, PoolCost: map[string]float64{}, PoolUnfinished: map[string]int{}}
			for i, c := range ps.Pools {
				row.Routed[c.Pool.Name] = r.Routed[i]
				row.PoolCost[c.Pool.Name] = r.ByPool[i].Cost
				row.PoolUnfinished[c.Pool.Name] = r.ByPool[i].Unfinished
			}
			rows = append(rows, row)
		}
	}
	if output == "json" {
		enc := json.NewEncoder(s.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\trouting\tcost\tnode-hours\twait p50\twait p95\tmachines\tinstances by pool\tcost by pool\tunfinished by pool")
	for _, r := range rows {
		var routed, cost, unf []string
		for _, c := range ps.Pools {
			routed = append(routed, fmt.Sprintf("%s %d", c.Pool.Name, r.Routed[c.Pool.Name]))
			cost = append(cost, fmt.Sprintf("%s $%.2f", c.Pool.Name, r.PoolCost[c.Pool.Name]))
			unf = append(unf, fmt.Sprintf("%s %d", c.Pool.Name, r.PoolUnfinished[c.Pool.Name]))
		}
		fmt.Fprintf(tw, "%s\t%s\t$%.2f\t%.1f\t%.0fs\t%.0fs\t%d\t%s\t%s\t%s\n", r.Policy, r.Routing, r.Cost, r.NodeHours,
			r.WaitP50, r.WaitP95, r.Machines, strings.Join(routed, ", "), strings.Join(cost, ", "), strings.Join(unf, ", "))
	}
	return tw.Flush()
}
