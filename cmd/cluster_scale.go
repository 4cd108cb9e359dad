package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
)

// clusterScaleOptions are what 'cluster scale' was asked: the bounds or
// count given (nil when not), on the cluster and pool named.
type clusterScaleOptions struct {
	clusterArgs
	// Scale's Options are filled in by the run.
	Scale cluster.ScaleOptions
}

func newClusterScaleCmd(f *cmdutil.Factory, runF runFunc[clusterScaleOptions]) *cobra.Command {
	var o clusterScaleOptions
	var minW, maxW, replicas int
	run := orRun(runF, withCluster(f, false, func(ctx context.Context, co cluster.Options, o *clusterScaleOptions) error {
		o.Scale.Options = co
		return cluster.Scale(ctx, o.Scale)
	}))
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
			o.Name = args[0]
			if cmd.Flags().Changed("min") {
				o.Scale.Min = &minW
			}
			if cmd.Flags().Changed("max") {
				o.Scale.Max = &maxW
			}
			if cmd.Flags().Changed("replicas") {
				o.Scale.Replicas = &replicas
			}
			if err := o.Scale.CheckFlags(); err != nil {
				return usageError{err}
			}
			return run(cmd.Context(), &o)
		},
	}
	c.Flags().IntVar(&minW, "min", 0, "autoscaler minimum workers")
	c.Flags().IntVar(&maxW, "max", 0, "autoscaler maximum workers")
	c.Flags().IntVar(&replicas, "replicas", 0, "worker count of a pool that is not autoscaled")
	c.Flags().StringVar(&o.Scale.Pool, "pool", "workers", "the worker pool (clusters[].pools[].name)")
	addDryRunFlag(c, &o.DryRun)
	return c
}
