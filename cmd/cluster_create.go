package cmd

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
)

// clusterCreateOptions are what 'cluster create' was asked. Output, only
// with DryRun, prints the objects instead of applying them.
type clusterCreateOptions struct {
	clusterArgs
	Output string
}

func newClusterCreateCmd(f *cmdutil.Factory, runF runFunc[clusterCreateOptions]) *cobra.Command {
	var o clusterCreateOptions
	run := orRun(runF, func(ctx context.Context, o *clusterCreateOptions) error {
		if o.Output != "" {
			lab, _, err := f.Lab(ctx)
			if err != nil {
				return err
			}
			return cluster.PrintObjects(ctx, f.IO, lab, o.Name, o.Output)
		}
		return withCluster(f, true, func(ctx context.Context, co cluster.Options, _ *clusterCreateOptions) error {
			return cluster.Create(ctx, co)
		})(ctx, o)
	})
	c := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a workload cluster from lab.yaml and wait until it is usable",
		Long: `Apply the cluster's Cluster API objects (server-side apply, field manager
labctl), wait until the infrastructure is provisioned, the control plane is
initialized and the kubeconfig secret exists, write the kubeconfig (mode
0600) to $XDG_CONFIG_HOME/labctl/<lab>/<cluster>.kubeconfig, install Cilium
into the cluster with Helm (ipam.mode kubernetes, k8sServiceHost the VIP),
and start the cluster's cluster-autoscaler. Re-running changes nothing that is already
right, and never touches the worker count the autoscaler chose.

A tenant (controlPlane.provider: kamaji) is one Cluster of labctl's tenant
ClusterClass, which 'mgmt install' applies; its API server is
https://<management.ip>:<controlPlane.port> (docs/tenants.md).

--dry-run -o yaml prints every object without a management cluster: for a
tenant, the one manifest 'kubectl apply -f' needs to make it.`,
		Example:           "  labctl cluster create lab1\n  labctl cluster create lab1 --dry-run\n  labctl cluster create lab1 --dry-run -o yaml",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: labNames(f, clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			if o.Output != "" {
				if err := checkOutput(o.Output, "yaml", "json"); err != nil {
					return err
				}
				if !o.DryRun {
					return usageError{errors.New("-o yaml/json prints the objects; use it with --dry-run")}
				}
			}
			return run(cmd.Context(), &o)
		},
	}
	addDryRunFlag(c, &o.DryRun)
	c.Flags().StringVarP(&o.Output, "output", "o", "", "with --dry-run: print the objects as yaml or json instead of the plan")
	completeOutput(c, "yaml", "json")
	return c
}
