package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/mgmt"
)

func newMgmtKubeconfigCmd(f *cmdutil.Factory) *cobra.Command {
	var export kube.ExportOptions
	c := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the management cluster's kubeconfig, write it to a file, or merge it",
		Long: `Print the kubeconfig mgmt up stored at
$XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig, or write it (mode 0600) to
the file --write names (never over an existing file without --force), or
--merge it into ~/.kube/config (or the file kubectl writes to under
$KUBECONFIG) as context labctl-<lab>-mgmt, made current; the other contexts
stay.`,
		Example: `  labctl mgmt kubeconfig > ~/.kube/lab
  labctl mgmt kubeconfig --write ~/.kube/lab
  labctl mgmt kubeconfig --merge && kubectl get nodes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lab, _, err := f.Lab(cmd.Context())
			if err != nil {
				return err
			}
			return mgmt.Kubeconfig(cmd.Context(), mgmt.KubeconfigOptions{IO: f.IO, Lab: lab, Path: export.Write, Force: export.Force, Merge: export.Merge})
		},
	}
	addKubeconfigExportFlags(c, &export)
	return c
}
