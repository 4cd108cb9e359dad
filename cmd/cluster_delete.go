package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
)

func newClusterDeleteCmd(f *cmdutil.Factory) *cobra.Command {
	var dryRun, yes bool
	c := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a workload cluster and its VMs",
		Long: `Stop the cluster's autoscaler, delete its Cluster object and wait until
Cluster API has removed its machines. Asks first (type the cluster's name)
unless --yes; without a terminal to ask on, --yes is needed.`,
		Example:           "  labctl cluster delete lab1\n  labctl cluster delete lab1 --dry-run\n  labctl cluster delete lab1 --yes",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: labNames(f, clusterNames),
		RunE: oneCluster(f, false, &dryRun, func(cmd *cobra.Command, o cluster.Options) error {
			return cluster.Delete(cmd.Context(), cluster.DeleteOptions{Options: o, Yes: yes})
		}),
	}
	addDryRunFlag(c, &dryRun)
	addYesFlag(c, &yes)
	return c
}
