package cli

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/tide-project/tide/deploy"
	"github.com/tide-project/tide/internal/kube/operator"
)

func newKubeCmd(s Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kube",
		Short: "Kubernetes mode: autoscale a Kubernetes cluster's nodes from NodePool resources",
		Long: `Kubernetes mode runs tide's pool drivers against a Kubernetes cluster: each NodePool
(tide.dev/v1alpha1) is one pool, its demand is the pods the scheduler marked
unschedulable, and its machines join as Nodes.

Install the NodePool CRD and the controller's RBAC first:

  tide kube install | kubectl apply -f -

Then run the controller (two replicas: one holds the Lease and acts):

  tide kube --kubeconfig ~/.kube/config     # or, in a pod, with no flag`,
		Args: cobra.NoArgs,
	}
	var o operator.Options
	var debug bool
	f := cmd.Flags()
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster service account)")
	f.StringVar(&o.Namespace, "namespace", "tide-system", "namespace of the leader Lease, the pools' journals and the kwok provider's state")
	f.StringVar(&o.Identity, "id", "", "this replica's name in the Lease and in fences (default hostname_random)")
	f.BoolVar(&o.LeaderElection, "leader-elect", true, "campaign for the Lease "+operator.LeaseName+"; only the holder acts")
	f.DurationVar(&o.LeaseDuration, "lease-duration", 15*time.Second, "leader Lease duration")
	f.DurationVar(&o.RenewDeadline, "renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up")
	f.DurationVar(&o.RetryPeriod, "retry-period", 2*time.Second, "how often candidates try the Lease")
	f.StringVar(&o.MetricsAddr, "metrics-addr", ":8080", "address of /metrics (0: off)")
	f.StringVar(&o.ProbeAddr, "probe-addr", ":8081", "address of /healthz and /readyz (0: off)")
	f.DurationVar(&o.Interval, "interval", 5*time.Second, "period of a pass when nothing changes")
	f.DurationVar(&o.Batch, "batch", 100*time.Millisecond, "delay after a pod or node change before the pass it triggers")
	f.BoolVar(&debug, "debug", false, "log at debug level")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if o.LeaseDuration <= o.RenewDeadline || o.RenewDeadline <= o.RetryPeriod || o.RetryPeriod <= 0 {
			return badInput(fmt.Errorf("--lease-duration (%s) must exceed --renew-deadline (%s), which must exceed --retry-period (%s) > 0",
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
		}
		level := slog.LevelInfo
		if debug {
			level = slog.LevelDebug
		}
		o.Logger = slog.New(slog.NewTextHandler(s.Err, &slog.HandlerOptions{Level: level}))
		return operator.Run(cmd.Context(), o)
	}
	cmd.AddCommand(newKubeInstallCmd(s))
	return cmd
}

func newKubeInstallCmd(s Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "install",
		Short: "Print the NodePool CRD and the controller's RBAC (the files under deploy/)",
		Long: `install prints the NodePool CustomResourceDefinition and the RBAC the controller
needs, as one YAML stream; pipe it to kubectl apply -f -.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := s.Out.Write(deploy.All())
			return err
		},
	}
}
