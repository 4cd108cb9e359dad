package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
)

func newClusterKubeconfigCmd(f *cmdutil.Factory) *cobra.Command {
	var file string
	c := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print a workload cluster's kubeconfig, or write it to a file",
		Long: `Print the cluster's admin kubeconfig (from the <cluster>-kubeconfig secret
Cluster API keeps) on stdout, or write it with mode 0600 to --file.`,
		Example:           "  labctl cluster kubeconfig lab1 > lab1.kubeconfig\n  labctl cluster kubeconfig lab1 --file ~/.kube/lab1",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: labNames(f, clusterNames),
		RunE: oneCluster(f, false, func(cmd *cobra.Command, o cluster.Options) error {
			data, err := cluster.Kubeconfig(cmd.Context(), o)
			if err != nil {
				return err
			}
			if file != "" {
				if err := cluster.WriteKubeconfig(file, data); err != nil {
					return err
				}
				fmt.Fprintf(f.IO.Err, "wrote %s (mode 0600)\n", file)
				return nil
			}
			_, err = f.IO.Out.Write(data)
			return err
		}),
	}
	c.Flags().StringVarP(&file, "file", "f", "", "write to this file (mode 0600) instead of stdout")
	return c
}
