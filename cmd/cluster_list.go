package cmd

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
)

// clusterReadOptions are what the commands that only read clusters were
// asked: the cluster ('cluster describe'; none for 'cluster list') and -o.
type clusterReadOptions struct {
	Name   string
	Output string
}

// newClusterListCmd hands its run clusterReadOptions; the run reaches the
// management cluster.
func newClusterListCmd(f *cmdutil.Factory, runF runFunc[clusterReadOptions]) *cobra.Command {
	var o clusterReadOptions
	run := orRun(runF, func(ctx context.Context, o *clusterReadOptions) error {
		co, err := f.ClusterOptions(ctx, "", false, false)
		if err != nil {
			return err
		}
		list, err := cluster.List(ctx, co)
		if err != nil {
			return err
		}
		return f.IO.Print(o.Output, list, func(w io.Writer) error { return co.ListText(w, list) })
	})
	c := &cobra.Command{
		Use:   "list",
		Short: "List workload clusters and their phase",
		Long: `List the Cluster API Clusters in the management cluster, with their phase,
control plane and worker counts. It reads only.`,
		Example: "  labctl cluster list\n  labctl cluster list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
