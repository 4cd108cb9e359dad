package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
)

// clusterDeleteOptions are what 'cluster delete' was asked.
type clusterDeleteOptions struct {
	clusterArgs
	Yes bool
}

func newClusterDeleteCmd(f *cmdutil.Factory, runF runFunc[clusterDeleteOptions]) *cobra.Command {
	var o clusterDeleteOptions
	run := orRun(runF, withCluster(f, false, func(ctx context.Context, co cluster.Options, o *clusterDeleteOptions) error {
		return cluster.Delete(ctx, cluster.DeleteOptions{Options: co, Yes: o.Yes})
	}))
	c := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a workload cluster and its VMs",
		Long: `Stop the cluster's autoscaler, delete its Cluster object and wait until
Cluster API has removed its machines. Asks first (type the cluster's name)
unless --yes; without a terminal to ask on, --yes is needed.`,
		Example:           "  labctl cluster delete lab1\n  labctl cluster delete lab1 --dry-run\n  labctl cluster delete lab1 --yes",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: labNames(f, clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			return run(cmd.Context(), &o)
		},
	}
	addDryRunFlag(c, &o.DryRun)
	addYesFlag(c, &o.Yes)
	return c
}
