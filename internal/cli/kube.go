package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/tide-project/tide/deploy"
	"github.com/tide-project/tide/internal/buildinfo"
	"github.com/tide-project/tide/internal/kube/kubelet"
	"github.com/tide-project/tide/internal/kube/nodeagent"
	"github.com/tide-project/tide/internal/kube/operator"
	"github.com/tide-project/tide/internal/kube/provreq"
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
	var lf logFlags
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
	f.StringVar(&o.LocalRoot, "local-root", "", "directory of the machines of local and netns NodePools, which run on this host (one subdirectory per NodePool)")
	f.StringVar(&o.NodeServer, "node-apiserver", "", "apiserver URL the machines of non-kwok NodePools join at (default: the one tide kube uses)")
	f.StringVar(&o.NodeCA, "node-ca", "", "PEM file of the CA the machines of non-kwok NodePools verify --node-apiserver with (default: tide kube's own CA and verification)")
	f.DurationVar(&o.Booking, "provisioning-booking", provreq.BookingTime, "how long capacity found or bought for a ProvisioningRequest stays booked for the pods that consume it")
	f.StringSliceVar(&o.Pools, "pools", nil, "act on these NodePools only (comma-separated names; default: every NodePool)")
	f.BoolVar(&debug, "debug", false, "log at debug level (--log-level debug)")
	lf.register(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if o.LeaseDuration <= o.RenewDeadline || o.RenewDeadline <= o.RetryPeriod || o.RetryPeriod <= 0 {
			return badInput(fmt.Errorf("--lease-duration (%s) must exceed --renew-deadline (%s), which must exceed --retry-period (%s) > 0",
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
		}
		if debug {
			lf.level = "debug"
		}
		log, err := lf.logger(s.Err, "kube")
		if err != nil {
			return err
		}
		o.Logger = log
		// client-go's own messages (leader election, reflectors) in tide's
		// format too, so --log-format json yields JSON lines only. klog is
		// process-wide: set here, at the process's edge, not in operator.Run,
		// which tests run many times in one process.
		klog.SetSlogLogger(log.With("component", "client-go"))
		return operator.Run(cmd.Context(), o)
	}
	cmd.AddCommand(newKubeInstallCmd(s), newKubeNodeCmd(s))
	return cmd
}

func newKubeInstallCmd(s Streams) *cobra.Command {
	var withDeployment bool
	var image string
	cmd := &cobra.Command{
		Use:   "install [--deployment [--image REF]]",
		Short: "Print the NodePool CRD and the controller's RBAC, and with --deployment tide kube's Deployment (the files under deploy/)",
		Long: `install prints the NodePool CustomResourceDefinition and the RBAC the controller
needs, as one YAML stream; pipe it to kubectl apply -f -. With --deployment it
adds tide kube itself: a Deployment of two replicas on a Lease (probes on
:8081, metrics on :8080), its metrics Service and a PodDisruptionBudget, running
--image (default ` + "`" + `ghcr.io/tide-project/tide:<this version>` + "`" + `). deploy/kustomization.yaml
is the same set for kubectl apply -k.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !withDeployment {
				if cmd.Flags().Changed("image") {
					return badInput(errors.New("--image goes with --deployment"))
				}
				_, err := s.Out.Write(deploy.All())
				return err
			}
			if image == "" {
				image = "ghcr.io/tide-project/tide:" + imageTag(buildinfo.Get().Version)
			}
			_, err := s.Out.Write(deploy.AllWithDeployment(image))
			return err
		},
	}
	cmd.Flags().BoolVar(&withDeployment, "deployment", false, "also print tide kube's Deployment, metrics Service and PodDisruptionBudget")
	cmd.Flags().StringVar(&image, "image", "", "with --deployment: the image to run (default ghcr.io/tide-project/tide:<this version>)")
	return cmd
}

// imageTag is the tag of this build's image: its version, or latest for a
// build that has none.
func imageTag(version string) string {
	if version == "" || version == "devel" || strings.ContainsAny(version, "+/") {
		return "latest"
	}
	return version
}

func newKubeNodeCmd(s Streams) *cobra.Command {
	var bootstrap, dataDir string
	var interval time.Duration
	var lf logFlags
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Join this machine to a Kubernetes cluster as a Node (the agent tide kube starts on its machines)",
		Long: `node registers this machine as a Node (name, providerID, the NodePool's labels and
taints, the machine's capacity) with the join credential tide kube minted for it, and
keeps the Node Ready and its Lease in kube-node-lease fresh until it is stopped. It runs
no containers: it is what a machine without a kubelet runs (the local provider's
machines). A join document in kubelet mode (a NodePool's spec.node_join.mode
kubelet) starts this machine's containerd and a real kubelet instead, which joins by
TLS bootstrap with the document's bootstrap token and runs the pods; their state is
under --data-dir, and both stop, with every pod, when this process is stopped.

The join document comes from --bootstrap (a file, or - for standard input).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := lf.logger(s.Err, "node-agent")
			if err != nil {
				return err
			}
			b, err := readBootstrap(bootstrap, s.In)
			if err != nil {
				return badInput(err)
			}
			return runNodeAgent(cmd.Context(), log, bootstrap, b, interval, dataDir)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "/var/lib/tide-node", "state of a kubelet machine (its containerd's and kubelet's)")
	cmd.Flags().StringVar(&bootstrap, "bootstrap", "", "join document (a file, or - for standard input)")
	cmd.Flags().DurationVar(&interval, "interval", 0, "heartbeat period of the Node's Ready condition and Lease (default: the join document's, else 10s)")
	lf.register(cmd)
	_ = cmd.MarkFlagRequired("bootstrap")
	return cmd
}

// runNodeAgent registers the machine as the Node of join document b (read
// from path) and heartbeats every interval (0: the document's) until ctx
// ends; a kubelet-mode document runs the machine's containerd and kubelet
// instead, their state under dataDir.
func runNodeAgent(ctx context.Context, log *slog.Logger, path string, b []byte, interval time.Duration, dataDir string) error {
	j, err := nodeagent.Parse(b)
	if err != nil {
		return badInput(fmt.Errorf("--bootstrap %s: %w", path, err))
	}
	if j.Mode == nodeagent.ModeKubelet {
		return kubelet.Run(ctx, j, kubelet.Config{DataDir: dataDir, Logger: log})
	}
	return nodeagent.Run(ctx, j, nodeagent.Config{Interval: interval, Logger: log})
}
