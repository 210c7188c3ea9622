package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
)

func newWorkersCmd(s Streams) *cobra.Command {
	var cf clientFlags
	var out string
	cmd := &cobra.Command{
		Use:   "workers [ID]",
		Short: "List workers, or show one, with what each still has available",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return askHead(cmd.Context(), s, &cf, out, func(c *client.Client, ctx context.Context) (*httpapi.WorkerJSON, error) {
					return c.Worker(ctx, args[0])
				}, func(w io.Writer, x *httpapi.WorkerJSON) error { return printWorkers(w, []httpapi.WorkerJSON{*x}) })
			}
			return askHead(cmd.Context(), s, &cf, out, (*client.Client).Workers, printWorkers)
		},
	}
	cf.register(cmd)
	outputFlag(cmd, &out)
	cmd.AddCommand(newDeleteWorkerCmd(s))
	return cmd
}

func printWorkers(w io.Writer, ws []httpapi.WorkerJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOST\tSTATUS\tPOOL\tCPU (FREE/TOTAL)\tMEM_MB (FREE/TOTAL)\tGPUS (FREE/TOTAL)\tFREE GPU INDICES\tLAST SEEN")
	for _, x := range ws {
		idx := make([]string, len(x.AvailableGPUIndices))
		for i, g := range x.AvailableGPUIndices {
			idx[i] = fmt.Sprint(g)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%g/%g\t%d/%d\t%d/%d\t%s\t%v\n", x.WorkerID, x.Host, x.Status, x.Pool,
			x.AvailableResources.CPUCores, x.TotalResources.CPUCores, x.AvailableResources.MemoryMB,
			x.TotalResources.MemoryMB, x.AvailableResources.GPUUnits, x.TotalResources.GPUUnits,
			strings.Join(idx, ","), deref(x.LastSeen))
	}
	return tw.Flush()
}

func newDeleteWorkerCmd(s Streams) *cobra.Command {
	var cf clientFlags
	var allOffline, yes bool
	cmd := &cobra.Command{
		Use:   "delete [ID | --all-offline]",
		Short: "Delete OFFLINE workers; their unfinished instances fail or are requeued",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == allOffline {
				return badInput(errors.New("give a worker id or --all-offline"))
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if err := c.DeleteWorker(cmd.Context(), args[0]); err != nil {
					return headError(err)
				}
				fmt.Fprintf(s.Out, "deleted %s\n", args[0])
				return nil
			}
			if !yes {
				ok, err := confirm(s, "Delete every OFFLINE worker? [y/N] ")
				if err != nil {
					return err
				}
				if !ok {
					return badInput(errors.New("not confirmed; nothing deleted (use -y)"))
				}
			}
			ids, err := c.DeleteOfflineWorkers(cmd.Context())
			if err != nil {
				return headError(err)
			}
			fmt.Fprintf(s.Out, "deleted %s\n", counted(len(ids), "worker"))
			return nil
		},
	}
	cmd.Flags().BoolVar(&allOffline, "all-offline", false, "delete every OFFLINE worker")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cf.register(cmd)
	return cmd
}
