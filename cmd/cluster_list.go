package cmd

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
)

func newClusterListCmd(f *cmdutil.Factory) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "list",
		Short: "List workload clusters and their phase",
		Long: `List the Cluster API Clusters in the management cluster, with their phase,
control plane and worker counts. It reads only.`,
		Example: "  labctl cluster list\n  labctl cluster list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			o, err := f.ClusterOptions(cmd.Context(), "", false, false)
			if err != nil {
				return err
			}
			list, err := cluster.List(cmd.Context(), o)
			if err != nil {
				return err
			}
			return f.IO.Print(out, list, func(w io.Writer) error { return o.ListText(w, list) })
		},
	}
	addOutputFlag(c, &out)
	readsOnly(c)
	return c
}
