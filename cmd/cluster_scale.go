package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
)

func newClusterScaleCmd(f *cmdutil.Factory) *cobra.Command {
	var dryRun bool
	var minW, maxW, replicas int
	var pool string
	c := &cobra.Command{
		Use:   "scale NAME",
		Short: "Change a cluster's worker bounds (the autoscaler picks the count)",
		Long: `Change the autoscaler's bounds of an autoscaled worker pool (--min, --max),
or the count of a fixed pool (--replicas). Also change lab.yaml, or the
next 'cluster create' sets the bounds written there again. A cluster with
several pools (clusters[].pools) names one with --pool.`,
		Example:           "  labctl cluster scale lab1 --min 0 --max 5\n  labctl cluster scale lab1 --max 8 --dry-run\n  labctl cluster scale lab1 --pool kvm --max 6",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: labNames(f, clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			so := cluster.ScaleOptions{Pool: pool}
			if cmd.Flags().Changed("min") {
				so.Min = &minW
			}
			if cmd.Flags().Changed("max") {
				so.Max = &maxW
			}
			if cmd.Flags().Changed("replicas") {
				so.Replicas = &replicas
			}
			if err := so.CheckFlags(); err != nil {
				return usageError{err}
			}
			return oneCluster(f, false, &dryRun, func(cmd *cobra.Command, o cluster.Options) error {
				so.Options = o
				return cluster.Scale(cmd.Context(), so)
			})(cmd, args)
		},
	}
	c.Flags().IntVar(&minW, "min", 0, "autoscaler minimum workers")
	c.Flags().IntVar(&maxW, "max", 0, "autoscaler maximum workers")
	c.Flags().IntVar(&replicas, "replicas", 0, "worker count of a pool that is not autoscaled")
	c.Flags().StringVar(&pool, "pool", "workers", "the worker pool (clusters[].pools[].name)")
	addDryRunFlag(c, &dryRun)
	return c
}
