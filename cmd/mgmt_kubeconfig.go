package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/mgmt"
)

func newMgmtKubeconfigCmd(f *cmdutil.Factory) *cobra.Command {
	var path string
	var force bool
	c := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the management cluster's kubeconfig, or write it to a file",
		Long: `Print the kubeconfig mgmt up stored at
$XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig, or write it (mode 0600) to
the file --write names.`,
		Example: `  labctl mgmt kubeconfig > ~/.kube/lab
  labctl mgmt kubeconfig --write ~/.kube/lab`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lab, _, err := f.Lab(cmd.Context())
			if err != nil {
				return err
			}
			return mgmt.Kubeconfig(cmd.Context(), mgmt.KubeconfigOptions{IO: f.IO, Lab: lab, Path: path, Force: force})
		},
	}
	c.Flags().StringVar(&path, "write", "", "write the kubeconfig to this file (mode 0600) instead of printing it")
	c.Flags().BoolVar(&force, "force", false, "overwrite the file --write names")
	return c
}
