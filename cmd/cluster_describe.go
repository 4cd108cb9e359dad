package cmd

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
)

// newClusterDescribeCmd hands its run clusterReadOptions; the run reaches
// the management cluster.
func newClusterDescribeCmd(f *cmdutil.Factory, runF runFunc[clusterReadOptions]) *cobra.Command {
	var o clusterReadOptions
	run := orRun(runF, func(ctx context.Context, o *clusterReadOptions) error {
		co, err := f.ClusterOptions(ctx, o.Name, false, false)
		if err != nil {
			return err
		}
		d, err := cluster.Describe(ctx, co)
		if err != nil {
			return err
		}
		return f.IO.Print(o.Output, d, func(w io.Writer) error { return cluster.DescribeText(f.IO, w, d) })
	})
	c := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a cluster's object tree and conditions, like clusterctl describe",
		Long: `Show the Cluster as clusterctl describe cluster does, with clusterctl's own
object tree: the Cluster, its infrastructure, the control plane and its
Machines, the worker MachineDeployments and their Machines, each with its
Ready (or Available) condition: status, reason, since and message. labctl
adds the cluster-autoscaler Deployment and a DETAILS column (replicas,
autoscaler bounds, machine phase and node). -o json|yaml prints the same
tree. It reads only; no secret is printed.`,
		Example:           "  labctl cluster describe lab1\n  labctl cluster describe lab1 -o json",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: labNames(f, clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return run(cmd.Context(), &o)
		},
	}
	addOutputFlag(c, &o.Output)
	readsOnly(c)
	return c
}
