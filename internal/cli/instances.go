package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/jobfile"
)

// submitFlags are PyLet's submit flags plus tide's extensions.
type submitFlags struct {
	config, name, target, gpuIdx, venv, restart, pool string
	cpu                                               float64
	gpus, memMB                                       int64
	exclusive, noExclusive, daemon, restartable       bool
	maxWait                                           time.Duration
	labels, env                                       []string
	replicas, maxRestarts                             int
	priority                                          int
	gang                                              bool
	gangName, gangWait                                string
}

func newSubmitCmd(s Streams) *cobra.Command {
	var (
		sf  submitFlags
		cf  clientFlags
		out string
	)
	cmd := &cobra.Command{
		Use:   "submit [flags] [--] COMMAND...",
		Short: "Submit an instance: a command with CPU, memory and GPU requests",
		Long: `Submit an instance: a command with its resource requests (PyLet's submit).
Flags go before the command. One argument is a shell command line, run as
written ('echo $HOME | wc -c'); several arguments are one command whose
boundaries are kept: each is shell-quoted and the quoted words joined, as
PyLet's Python client does for a list (shlex.join), so
"tide submit -- sh -c 'exit 3'" runs sh with the two arguments -c and
"exit 3", and exits 3.

A TOML job file (-c) can hold every field: command (a string, or an array that
is shell-quoted), name, venv, replicas, restart_policy, max_restarts, pool,
daemon, restartable, max_wait, priority, gang (true or a [gang] table of name, size,
max_wait); [resources] cpus, gpus, memory ("8Gi", or MB), gpu_indices, exclusive,
target_worker; [env] and [labels] tables. ${VAR} and $VAR are expanded from the
environment. Flags given on the command line win over the file, which wins over
the defaults (1 CPU core, no GPU, 512 MB).`,
		Example: `  tide submit --gpu-units 1 --name train -- python train.py --epochs 3
  tide submit -c job.toml --label team=nlp`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			req, err := sf.request(cmd, args, os.LookupEnv)
			if err != nil {
				return err
			}
			return askHead(cmd.Context(), s, &cf, out, func(c *client.Client, ctx context.Context) (httpapi.SubmitResponse, error) {
				return c.Submit(ctx, req)
			}, func(w io.Writer, res httpapi.SubmitResponse) error {
				ids := res.InstanceIDs
				if len(ids) == 0 {
					ids = []string{res.InstanceID}
				}
				for _, id := range ids {
					fmt.Fprintln(w, id)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // flags after the command belong to it
	f.StringVarP(&sf.config, "config", "c", "", "TOML job file")
	f.Float64Var(&sf.cpu, "cpu-cores", 1, "CPU cores (fractions allowed)")
	f.Int64Var(&sf.gpus, "gpu-units", 0, "GPUs")
	f.Int64Var(&sf.memMB, "memory-mb", 512, "memory in MB")
	f.StringVar(&sf.name, "name", "", "instance name (unique; default: none, the instance is known by its id)")
	f.StringVar(&sf.target, "target-worker", "", "run on this worker (by name)")
	f.StringVar(&sf.gpuIdx, "gpu-indices", "", "exact GPUs on the target worker, e.g. 0,1")
	f.BoolVar(&sf.exclusive, "exclusive", true, "hold the GPUs exclusively")
	f.BoolVar(&sf.noExclusive, "no-exclusive", false, "share the GPUs with other non-exclusive instances")
	f.StringArrayVar(&sf.labels, "label", nil, "label key=value (repeatable)")
	f.StringArrayVar(&sf.env, "env", nil, "environment variable KEY=value (repeatable)")
	f.StringVar(&sf.venv, "venv", "", "absolute path of a Python virtualenv to activate")
	f.IntVar(&sf.replicas, "replicas", 1, "number of identical instances (names get -0, -1, ...)")
	f.StringVar(&sf.restart, "restart-policy", "", "never (default), on-failure or always")
	f.IntVar(&sf.maxRestarts, "max-restarts", 0, "restarts allowed by the policy (default 3 with a policy)")
	f.StringVar(&sf.pool, "pool", "", "node pool to run in")
	f.BoolVar(&sf.daemon, "daemon", false, "a daemon never holds a node up")
	f.DurationVar(&sf.maxWait, "max-wait", 0, "end FAILED if no capacity places it within this long, e.g. 30m (default: its pool's max_wait, if any)")
	f.BoolVar(&sf.restartable, "restartable", false, "consolidation may stop it and start it again on another node (its attempt's work is lost)")
	f.IntVar(&sf.priority, "priority", 0, "priority: higher is placed and bought for first, and may preempt lower restartable work on a full pool")
	f.BoolVar(&sf.gang, "gang", false, "the replicas are a gang: all start together or none (TIDE_GANG_RANK, TIDE_GANG_HOSTS, ... in their env)")
	f.StringVar(&sf.gangName, "gang-name", "", "name of the gang (default: --name); implies --gang")
	f.StringVar(&sf.gangWait, "gang-max-wait", "", "fail the whole gang when not placed within this duration (e.g. 30m); implies --gang")
	cf.register(cmd)
	outputFlag(cmd, &out)
	return cmd
}

// request builds the submit request: flags set on the command line, then
// the job file, then the head's defaults.
func (sf *submitFlags) request(cmd *cobra.Command, args []string, lookup func(string) (string, bool)) (*httpapi.SubmitRequest, error) {
	f := cmd.Flags()
	job := &jobfile.File{}
	if sf.config != "" {
		data, err := os.ReadFile(sf.config)
		if err != nil {
			return nil, badInput(fmt.Errorf("-c: %w", err))
		}
		if job, err = jobfile.Parse(data, lookup); err != nil {
			return nil, badInput(fmt.Errorf("%s: %w", sf.config, err))
		}
	}
	req := &httpapi.SubmitRequest{Name: job.Name, TargetWorker: job.TargetWorker, GPUIndices: job.GPUIndices,
		Exclusive: job.Exclusive, Labels: job.Labels, Env: job.Env, Venv: job.Venv, Replicas: job.Replicas,
		RestartPolicy: job.RestartPolicy, MaxRestarts: job.MaxRestarts, Pool: job.Pool, Daemon: job.Daemon,
		Restartable: job.Restartable, MaxWait: job.MaxWait, Priority: job.Priority, ResourceRequirements: &httpapi.ResourceSpec{CPUCores: job.CPUCores, GPUUnits: job.GPUs, MemoryMB: job.MemoryMB}}
	req.Command = job.Command
	switch {
	case len(args) == 1:
		req.Command = &args[0] // one argument is a shell command line
	case len(args) > 1:
		c := jobfile.ShellJoin(args) // keep the boundaries: sh -c 'exit 3' stays three words
		req.Command = &c
	}
	if req.Command == nil || strings.TrimSpace(*req.Command) == "" {
		return nil, badInput(errors.New("no command: give it as arguments or as command in the job file"))
	}
	if f.Changed("cpu-cores") {
		if sf.cpu < 0 {
			return nil, badInput(fmt.Errorf("--cpu-cores %v must not be negative", sf.cpu))
		}
		req.ResourceRequirements.CPUCores = &sf.cpu
	}
	if f.Changed("gpu-units") {
		if sf.gpus < 0 {
			return nil, badInput(fmt.Errorf("--gpu-units %d must not be negative", sf.gpus))
		}
		req.ResourceRequirements.GPUUnits = &sf.gpus
	}
	if f.Changed("memory-mb") {
		if sf.memMB < 0 {
			return nil, badInput(fmt.Errorf("--memory-mb %d must not be negative", sf.memMB))
		}
		req.ResourceRequirements.MemoryMB = &sf.memMB
	}
	setStr := func(flag, v string, dst **string) {
		if f.Changed(flag) {
			*dst = &v
		}
	}
	setStr("name", sf.name, &req.Name)
	setStr("target-worker", sf.target, &req.TargetWorker)
	setStr("venv", sf.venv, &req.Venv)
	setStr("restart-policy", sf.restart, &req.RestartPolicy)
	setStr("pool", sf.pool, &req.Pool)
	if f.Changed("gpu-indices") {
		idx, err := parseIndices(sf.gpuIdx)
		if err != nil {
			return nil, err
		}
		req.GPUIndices = idx
		req.ResourceRequirements.GPUUnits = nil // implied by the indices
	} else if f.Changed("gpu-units") {
		req.GPUIndices = nil // the flag wins over the file's indices
	}
	if f.Changed("exclusive") && f.Changed("no-exclusive") {
		return nil, badInput(errors.New("--exclusive and --no-exclusive contradict each other"))
	}
	if f.Changed("exclusive") {
		req.Exclusive = &sf.exclusive
	}
	if f.Changed("no-exclusive") {
		ex := !sf.noExclusive
		req.Exclusive = &ex
	}
	if f.Changed("daemon") {
		req.Daemon = &sf.daemon
	}
	if f.Changed("restartable") {
		req.Restartable = &sf.restartable
	}
	if f.Changed("max-wait") {
		mw := sf.maxWait.String()
		req.MaxWait = &mw
	}
	if f.Changed("replicas") {
		req.Replicas = &sf.replicas
	}
	if f.Changed("priority") {
		req.Priority = &sf.priority
	}
	if g := job.Gang; g != nil {
		req.Gang = &httpapi.GangRequest{Name: g.Name, Size: g.Size, MaxWait: g.MaxWait}
	}
	if f.Changed("gang") && !sf.gang {
		req.Gang = nil
	} else if sf.gang || f.Changed("gang-name") || f.Changed("gang-max-wait") {
		if req.Gang == nil {
			req.Gang = &httpapi.GangRequest{}
		}
		if f.Changed("gang-name") {
			req.Gang.Name = sf.gangName
		}
		if f.Changed("gang-max-wait") {
			req.Gang.MaxWait = sf.gangWait
		}
		if f.Changed("replicas") {
			req.Gang.Size = 0 // --replicas sizes the gang
		}
	}
	if f.Changed("max-restarts") {
		req.MaxRestarts = &sf.maxRestarts
	}
	var err error
	if req.Labels, err = mergeKV("label", req.Labels, sf.labels); err != nil {
		return nil, err
	}
	if req.Env, err = mergeKV("env", req.Env, sf.env); err != nil {
		return nil, err
	}
	return req, nil
}

// mergeKV overlays key=value flags on the file's map.
func mergeKV(flag string, base map[string]string, vals []string) (map[string]string, error) {
	over, err := parseKV(flag, vals)
	if err != nil {
		return nil, err
	}
	if len(over) == 0 {
		return base, nil
	}
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out, nil
}

func parseIndices(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, badInput(fmt.Errorf("--gpu-indices %q: want non-negative integers separated by commas", s))
		}
		out = append(out, n)
	}
	return out, nil
}

func newListCmd(s Streams) *cobra.Command {
	var (
		cf            clientFlags
		out, status   string
		pool          string
		labels        []string
		wide, idsOnly bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List instances (newest first), filtered by status and labels",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			lbl, err := parseKV("label", labels)
			if err != nil {
				return err
			}
			opts := client.ListOptions{Status: strings.ToUpper(status), Labels: lbl}
			if cmd.Flags().Changed("pool") {
				opts.Pool = &pool
			}
			return askHead(cmd.Context(), s, &cf, out, func(c *client.Client, ctx context.Context) ([]httpapi.InstanceJSON, error) {
				return c.Instances(ctx, opts)
			}, func(w io.Writer, ins []httpapi.InstanceJSON) error {
				if idsOnly {
					for _, in := range ins {
						fmt.Fprintln(w, in.InstanceID)
					}
					return nil
				}
				return printInstances(w, ins, wide)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only instances in this status: PENDING, ASSIGNED, RUNNING, UNKNOWN, COMPLETED, FAILED or CANCELLED")
	f.StringArrayVar(&labels, "label", nil, "only instances with label key=value (repeatable: all must match)")
	f.StringVar(&pool, "pool", "", "only instances of this pool")
	f.BoolVar(&wide, "wide", false, "also show labels and resources")
	f.BoolVarP(&idsOnly, "quiet", "q", false, "print ids only")
	cf.register(cmd)
	outputFlag(cmd, &out)
	return cmd
}

func printInstances(w io.Writer, ins []httpapi.InstanceJSON, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hdr := "ID\tNAME\tSTATUS\tATTEMPT\tWORKER\tENDPOINT\tEXIT\tCREATED"
	if wide {
		hdr += "\tCPU\tMEM_MB\tGPUS\tLABELS"
	}
	hdr += "\tREASON"
	fmt.Fprintln(tw, hdr)
	for _, in := range ins {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%v\t%v\t%v\t%v", in.InstanceID, deref(in.Name), in.DisplayStatus, in.Attempt,
			deref(in.AssignedTo), deref(in.Endpoint), deref(in.ExitCode), deref(in.CreatedAt))
		if wide {
			var lbl []string
			for _, k := range slices.Sorted(maps.Keys(in.Labels)) {
				lbl = append(lbl, k+"="+in.Labels[k])
			}
			fmt.Fprintf(tw, "\t%g\t%d\t%d\t%s", in.ResourceRequirements.CPUCores, in.ResourceRequirements.MemoryMB,
				in.ResourceRequirements.GPUUnits, strings.Join(lbl, ","))
		}
		fmt.Fprintf(tw, "\t%s\n", instanceReason(&in))
	}
	return tw.Flush()
}

// instanceArg resolves ID, NAME or --name to an instance: an argument is
// looked up as an id first, then as a name.
func instanceArg(ctx context.Context, c *client.Client, args []string, name string) (*httpapi.InstanceJSON, error) {
	switch {
	case len(args) == 1 && name != "":
		return nil, badInput(errors.New("give an instance id or --name, not both"))
	case len(args) == 1:
		in, err := c.Instance(ctx, args[0])
		if client.IsNotFound(err) {
			if in, err = c.InstanceByName(ctx, args[0]); client.IsNotFound(err) {
				return nil, badInput(fmt.Errorf("no instance with id or name %q", args[0]))
			}
		}
		return in, headError(err)
	case name != "":
		in, err := c.InstanceByName(ctx, name)
		return in, headError(err)
	}
	return nil, badInput(errors.New("give an instance id or --name"))
}

func newGetCmd(s Streams) *cobra.Command {
	var cf clientFlags
	var out, name string
	cmd := &cobra.Command{
		Use:   "get [ID | NAME | --name NAME]",
		Short: "Show one instance",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return askHead(cmd.Context(), s, &cf, out, func(c *client.Client, ctx context.Context) (*httpapi.InstanceJSON, error) {
				return instanceArg(ctx, c, args, name)
			}, printInstance)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "instance name")
	cf.register(cmd)
	outputFlag(cmd, &out)
	return cmd
}

// printInstance prints one instance as "key: value" lines.
func printInstance(w io.Writer, in *httpapi.InstanceJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rows := []struct {
		k string
		v any
	}{
		{"id", in.InstanceID}, {"name", deref(in.Name)}, {"command", in.Command}, {"status", in.DisplayStatus},
		{"attempt", in.Attempt}, {"worker", deref(in.AssignedTo)}, {"endpoint", deref(in.Endpoint)},
		{"exit code", deref(in.ExitCode)}, {"failure reason", deref(in.FailureReason)},
		{"waiting", orDash(in.WaitingReason)},
		{"resources", fmt.Sprintf("cpu %g, memory %d MB, gpus %d", in.ResourceRequirements.CPUCores,
			in.ResourceRequirements.MemoryMB, in.ResourceRequirements.GPUUnits)},
		{"gpu indices", fmt.Sprint(in.GPUIndices)}, {"exclusive", in.Exclusive},
		{"target worker", deref(in.TargetWorker)}, {"labels", kvList(in.Labels)}, {"env", kvList(in.Env)},
		{"restart policy", fmt.Sprintf("%s (%d of %d restarts)", in.RestartPolicy, in.Restarts, in.MaxRestarts)},
		{"pool", in.Pool}, {"created", deref(in.CreatedAt)}, {"assigned", deref(in.AssignedAt)},
		{"started", deref(in.StartedAt)}, {"ended", deref(in.EndedAt)},
		{"cancel requested", deref(in.CancellationRequestedAt)},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%v\n", r.k, r.v)
	}
	return tw.Flush()
}

func newLogsCmd(s Streams) *cobra.Command {
	var (
		cf     clientFlags
		name   string
		follow bool
		tail   int64
		poll   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "logs [ID | NAME | --name NAME]",
		Short: "Print an instance's output (stdout and stderr), optionally following it",
		Long: `Print an instance's output (stdout and stderr together). With -f, keep printing
until the instance has finished. Offsets survive the worker's log rotation: a
follower prints every byte once; bytes rotated away before they could be read
are reported on stderr.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			in, err := instanceArg(cmd.Context(), c, args, name)
			if err != nil {
				return err
			}
			opts := client.ReadOptions{Follow: follow, Poll: poll,
				OnGap: func(from, to int64) {
					fmt.Fprintf(s.Err, "tide: %d bytes of output [%d, %d) were rotated away before they could be read\n", to-from, from, to)
				},
				OnMove: func(worker string, attempt int64) {
					fmt.Fprintf(s.Err, "tide: instance moved to worker %s (attempt %d); its output starts again\n", worker, attempt)
				}}
			if cmd.Flags().Changed("tail") {
				if tail < 0 {
					return badInput(fmt.Errorf("--tail %d must not be negative", tail))
				}
				opts.Tail = &tail
			}
			if _, err := c.ReadLogs(cmd.Context(), in.InstanceID, s.Out, opts); err != nil {
				if errors.Is(err, context.Canceled) {
					return nil // Ctrl-C while following
				}
				return headError(err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "instance name")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing until the instance finishes")
	f.Int64Var(&tail, "tail", 0, "start with the last N bytes")
	f.DurationVar(&poll, "poll", time.Second, "how often to look for new output when following")
	cf.register(cmd)
	return cmd
}

func newCancelCmd(s Streams) *cobra.Command {
	var cf clientFlags
	var name string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "cancel [ID | NAME | --name NAME]",
		Short: "Cancel an instance: SIGTERM, then SIGKILL after the grace period",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			in, err := instanceArg(cmd.Context(), c, args, name)
			if err != nil {
				return err
			}
			var g *time.Duration
			if cmd.Flags().Changed("grace-period") {
				if grace < 0 {
					return badInput(fmt.Errorf("--grace-period %s must not be negative", grace))
				}
				g = &grace
			}
			st, err := c.Cancel(cmd.Context(), in.InstanceID, g)
			if err != nil {
				return headError(err)
			}
			fmt.Fprintf(s.Out, "%s %s\n", st, in.InstanceID)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "instance name")
	cmd.Flags().DurationVar(&grace, "grace-period", 0, "SIGTERM→SIGKILL grace (default: the head's, 30s; capped by the head)")
	cf.register(cmd)
	return cmd
}

func newResultCmd(s Streams) *cobra.Command {
	var cf clientFlags
	var out, name string
	var wait bool
	var poll time.Duration
	cmd := &cobra.Command{
		Use:   "result [ID | NAME | --name NAME]",
		Short: "Show how an instance ended (or that it has not yet)",
		Long: `Show how an instance ended, or that it has not yet. The exit status is 0 when it
COMPLETED (or has not finished, without --wait) and 1 when it FAILED or was
CANCELLED, so scripts can rely on it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			in, err := instanceArg(cmd.Context(), c, args, name)
			if err != nil {
				return err
			}
			var r client.Result
			for {
				if r, err = c.Result(cmd.Context(), in.InstanceID); err != nil {
					return headError(err)
				}
				if r.Done || !wait {
					break
				}
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(poll):
				}
			}
			if r.Status == "CANCELLED" {
				// PyLet's answer is {"cancelled": true}: take the exit code
				// from the instance, so result and get agree.
				if fresh, err := c.Instance(cmd.Context(), in.InstanceID); err == nil {
					r.ExitCode = fresh.ExitCode
				}
			}
			if out == "json" {
				if err := writeJSONOut(s.Out, r); err != nil {
					return err
				}
			} else {
				switch {
				case !r.Done:
					fmt.Fprintf(s.Out, "%s: not yet completed\n", in.InstanceID)
				case r.Status == "FAILED":
					fmt.Fprintf(s.Out, "%s: FAILED exit_code=%v failure_reason=%v\n", in.InstanceID, deref(r.ExitCode), deref(r.FailureReason))
				default:
					fmt.Fprintf(s.Out, "%s: %s exit_code=%v\n", in.InstanceID, r.Status, deref(r.ExitCode))
				}
			}
			if r.Status == "FAILED" || r.Status == "CANCELLED" {
				return exitStatus{ExitError} // scripts can rely on it
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "instance name")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the instance has finished")
	cmd.Flags().DurationVar(&poll, "poll", time.Second, "how often to ask when waiting")
	cf.register(cmd)
	outputFlag(cmd, &out)
	return cmd
}

func newDeleteCmd(s Streams) *cobra.Command {
	var cf clientFlags
	var name, status string
	var all, yes bool
	cmd := &cobra.Command{
		Use:   "delete [ID | --name NAME | --all [--status S]]",
		Short: "Delete finished instances (cancel running ones first)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !all {
				if status != "" {
					return badInput(errors.New("--status goes with --all"))
				}
				in, err := instanceArg(ctx, c, args, name)
				if err != nil {
					return err
				}
				if err := c.DeleteInstance(ctx, in.InstanceID); err != nil {
					return headError(err)
				}
				fmt.Fprintf(s.Out, "deleted %s\n", in.InstanceID)
				return nil
			}
			if len(args) > 0 || name != "" {
				return badInput(errors.New("--all deletes by status; give no id or --name"))
			}
			status = strings.ToUpper(status)
			if !yes {
				what := "every finished instance"
				if status != "" {
					what = "every " + status + " instance"
				}
				ok, err := confirm(s, fmt.Sprintf("Delete %s? [y/N] ", what))
				if err != nil {
					return err
				}
				if !ok {
					return badInput(errors.New("not confirmed; nothing deleted (use -y)"))
				}
			}
			ids, err := c.DeleteInstances(ctx, status)
			if err != nil {
				return headError(err)
			}
			fmt.Fprintf(s.Out, "deleted %s\n", counted(len(ids), "instance"))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "instance name")
	f.BoolVar(&all, "all", false, "delete every finished instance (COMPLETED, FAILED, CANCELLED)")
	f.StringVar(&status, "status", "", "with --all: only this terminal status")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cf.register(cmd)
	return cmd
}

// confirm asks a yes/no question on the streams.
func confirm(s Streams, q string) (bool, error) {
	fmt.Fprint(s.Err, q)
	if s.In == nil {
		return false, nil
	}
	line, err := bufio.NewReader(s.In).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read confirmation: %w", err)
	}
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes", nil
}

// kvList renders a map as sorted k=v pairs separated by commas; "-" when empty.
func kvList(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// instanceReason is the REASON column: why a pending instance waits, or why
// a failed one failed.
func instanceReason(in *httpapi.InstanceJSON) string {
	switch {
	case in.WaitingReason != "":
		return in.WaitingReason
	case in.FailureReason != nil:
		return *in.FailureReason
	}
	return "-"
}

// counted is "1 instance", "2 instances".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
