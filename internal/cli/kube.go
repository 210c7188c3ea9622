package cli

import (
	"github.com/spf13/cobra"

	"github.com/tide-project/tide/deploy"
)

func newKubeCmd(s Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kube",
		Short: "Kubernetes mode: autoscale a Kubernetes cluster's nodes from NodePool resources",
		Long: `Kubernetes mode runs tide's pool drivers against a Kubernetes cluster: each NodePool
(tide.dev/v1alpha1) is one pool, its demand is the pods the scheduler marked
unschedulable, and its machines join as Nodes.

Install the NodePool CRD and the controller's RBAC first:

  tide kube install | kubectl apply -f -`,
		Args: cobra.NoArgs,
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
