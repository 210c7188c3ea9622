package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/buildinfo"
	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
)

// poolName shows the default pool "" readably.
func poolName(p string) string {
	if p == "" {
		return "(default)"
	}
	return p
}

// ago formats a duration in seconds the way people read ages: 45s, 12m,
// 3h5m, 2d4h.
func ago(sec float64) string {
	d := time.Duration(sec * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		h := int(d.Hours())
		return fmt.Sprintf("%dh%dm", h, int(d.Minutes())-60*h)
	}
	days := int(d.Hours()) / 24
	return fmt.Sprintf("%dd%dh", days, int(d.Hours())-24*days)
}

func newPoolsCmd(s Streams) *cobra.Command {
	var cf clientFlags
	var out string
	cmd := &cobra.Command{
		Use:   "pools",
		Short: "List pools: desired, ready, pending and draining nodes, queue and the last scaling decision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The head's build goes under the table; a head older than
			// GET /version has no line, and -o json stays the list.
			var head *buildinfo.Info
			pools := func(c *client.Client, ctx context.Context) ([]httpapi.PoolJSON, error) {
				ps, err := c.Pools(ctx)
				if err == nil && out != "json" {
					if v, verr := c.Version(ctx); verr == nil {
						head = &v
					}
				}
				return ps, err
			}
			print := func(w io.Writer, ps []httpapi.PoolJSON) error {
				if err := printPools(w, ps); err != nil || head == nil {
					return err
				}
				_, err := fmt.Fprintf(w, "\nhead: %s\n", head)
				return err
			}
			return askHead(cmd.Context(), s, &cf, out, pools, print)
		},
	}
	cf.register(cmd)
	outputFlag(cmd, &out)
	return cmd
}

func printPools(w io.Writer, ps []httpapi.PoolJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tPOLICY\tNODES (MIN/DESIRED/MAX)\tDESIRED\tREADY\tPENDING\tDRAINING\tMARKED\tQUEUED\tINFLIGHT\tCPU (USED/TOTAL)\tLAST DECISION")
	for _, p := range ps {
		policy, spec, desired := "-", "-", "-"
		if p.Managed {
			policy, desired = p.Policy, fmt.Sprint(p.Desired)
		}
		if p.NodeSpec != nil {
			spec = fmt.Sprintf("%d/%d/%d", p.NodeSpec.Min, p.NodeSpec.Desired, p.NodeSpec.Max)
		}
		last := "-"
		if d := p.LastDecision; d != nil {
			last = d.Reason
			if !d.Time.IsZero() {
				last += " (" + ago(d.AgeSeconds) + " ago)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%g/%g\t%s\n", poolName(p.Name), policy, spec, desired,
			p.Ready, p.Pending, p.Draining, p.Marked, p.Queued, p.Inflight, p.UsedResources.CPUCores,
			p.TotalResources.CPUCores, last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range ps {
		if f := p.Fleet; f != nil {
			line := fmt.Sprintf("%s: fleet cluster %s", poolName(p.Name), f.Cluster)
			if f.Shard != 0 {
				line += fmt.Sprintf(" on shard %d", f.Shard)
			}
			line += fmt.Sprintf(": asked %d, granted %d, short %d", f.Asked, f.Granted, f.Short)
			if f.Why != "" {
				line += " (" + f.Why + ")"
			}
			if f.LastError != "" {
				line += "; fleet unreachable, running machines keep their work: " + f.LastError
			}
			fmt.Fprintln(w, line)
		}
	}
	return nil
}

func newNodesCmd(s Streams) *cobra.Command {
	var cf clientFlags
	var out, pool string
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List nodes: state, worker, per-node use, deletion marks and ages",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var p *string
			if cmd.Flags().Changed("pool") {
				p = &pool
			}
			return askHead(cmd.Context(), s, &cf, out, func(c *client.Client, ctx context.Context) ([]httpapi.NodeJSON, error) {
				return c.Nodes(ctx, p)
			}, printNodes)
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "only the nodes of this pool")
	cf.register(cmd)
	outputFlag(cmd, &out)
	return cmd
}

func printNodes(w io.Writer, ns []httpapi.NodeJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tNODE\tORDINAL\tSTATE\tWORKER\tCPU (USED/TOTAL)\tMEM_MB (USED/TOTAL)\tGPUS (USED/TOTAL)\tINSTANCES\tMARKED\tAGE\tLIFECYCLE")
	for _, n := range ns {
		worker := n.WorkerStatus
		if worker == "" {
			worker = "-"
		}
		if n.Cordoned {
			worker += ",cordoned"
		}
		marked := "-"
		if !n.MarkedAt.IsZero() {
			marked = n.MarkedAt.UTC().Format(httpapi.TimeFormat)
		}
		instances := fmt.Sprint(n.Instances)
		if n.Daemons > 0 {
			instances += fmt.Sprintf(" (+%d daemon)", n.Daemons)
		}
		age := "-"
		if !n.CreatedAt.IsZero() {
			age = ago(n.AgeSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%g/%g\t%d/%d\t%d/%d\t%s\t%s\t%s\t%s\n", poolName(n.Pool), n.ID, n.Ordinal, n.State,
			worker, n.UsedResources.CPUCores, n.TotalResources.CPUCores, n.UsedResources.MemoryMB, n.TotalResources.MemoryMB,
			n.UsedResources.GPUUnits, n.TotalResources.GPUUnits, instances, marked, age, lifecycleText(n))
	}
	return tw.Flush()
}

// lifecycleText says what happens to a node beyond scaling: unhealthy,
// being replaced (repair, drift, expiry) or due to be and waiting.
func lifecycleText(n httpapi.NodeJSON) string {
	var parts []string
	if n.Unhealthy != "" {
		parts = append(parts, "unhealthy: "+n.Unhealthy)
	}
	if n.Disruption != "" {
		parts = append(parts, n.Disruption)
	} else if n.Replacing != "" {
		parts = append(parts, "replacing ("+n.Replacing+")")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

func newEventsCmd(s Streams) *cobra.Command {
	var (
		cf          clientFlags
		out, pool   string
		since       int64
		limit       int
		follow      bool
		reconnectIn time.Duration
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show what each pool decided or declined to do, and why (oldest first); -f follows",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if limit < 0 || limit > httpapi.MaxEventLimit {
				return badInput(fmt.Errorf("--limit: want 1 to %d, got %d", httpapi.MaxEventLimit, limit))
			}
			if since < 0 {
				return badInput(fmt.Errorf("--since: want an event id ≥ 0, got %d", since))
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			o := client.EventOptions{Limit: limit}
			if cmd.Flags().Changed("pool") {
				o.Pool = &pool
			}
			if cmd.Flags().Changed("since") {
				o.Since = &since
			}
			if !follow {
				evs, err := c.Events(cmd.Context(), o)
				if err != nil {
					return headError(err)
				}
				if out == "json" {
					return writeJSONOut(s.Out, evs)
				}
				fmt.Fprintln(s.Out, eventHeader)
				for _, e := range evs {
					fmt.Fprintln(s.Out, eventRow(e))
				}
				return nil
			}
			if out == "table" {
				fmt.Fprintln(s.Out, eventHeader)
			}
			enc := json.NewEncoder(s.Out)
			err = c.FollowEvents(cmd.Context(), o, func(e httpapi.EventJSON) error {
				if out == "json" {
					return enc.Encode(e) // one object per line
				}
				_, err := fmt.Fprintln(s.Out, eventRow(e))
				return err
			}, client.FollowOptions{Backoff: reconnectIn})
			return headError(err)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing events as they happen (Ctrl-C stops); -o json prints one object per line")
	f.StringVar(&pool, "pool", "", "only the events of this pool")
	f.Int64Var(&since, "since", 0, "only events after this event id (default: the newest --limit events)")
	f.IntVar(&limit, "limit", 0, fmt.Sprintf("at most this many events (default %d)", httpapi.DefaultEventLimit))
	f.DurationVar(&reconnectIn, "reconnect-backoff", time.Second, "with -f, the pause before reconnecting after the head ends a stream early")
	cf.register(cmd)
	outputFlag(cmd, &out)
	return cmd
}

const eventHeader = "ID      TIME                 POOL          TYPE     REASON                  NODE          MESSAGE"

// eventRow formats one event in fixed columns, so rows line up while
// following too.
func eventRow(e httpapi.EventJSON) string {
	node := e.Node
	if node == "" {
		node = "-"
	}
	msg := strings.ReplaceAll(e.Message, "\n", " ")
	return fmt.Sprintf("%-7d %-20s %-13s %-8s %-23s %-13s %s", e.ID, e.Time.UTC().Format(httpapi.TimeFormat),
		poolName(e.Pool), e.Type, e.Reason, node, msg)
}
