package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/mgmt"
)

func newMgmtKubeconfigCmd(f *cmdutil.Factory, runF runFunc[kubeconfigOptions]) *cobra.Command {
	var o kubeconfigOptions
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *kubeconfigOptions) error {
		ro, export := o.ReadOnly, o.Export
		ko := mgmt.KubeconfigOptions{IO: f.IO, Lab: lab, Path: export.Write, Force: export.Force, Merge: export.Merge}
		if ro.on() {
			return mgmt.ReadOnlyKubeconfig(ctx, ko, ro.request(), ro.dryRun)
		}
		return mgmt.Kubeconfig(ctx, ko)
	}))
	c := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the management cluster's kubeconfig, write it to a file, or merge it",
		Long: `Print the kubeconfig mgmt up stored at
$XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig, or write it (mode 0600) to
the file --write names (never over an existing file without --force), or
--merge it into ~/.kube/config (or the file kubectl writes to under
$KUBECONFIG) as context labctl-<lab>-mgmt, made current; the other contexts
stay.

--read-only hands out a kubeconfig that can only look, for everyday use:
ServiceAccount kube-system/labctl-readonly bound to ClusterRole view (which
reads no Secrets, so no cluster's credentials), with a token that expires
after --ttl. --revoke deletes that ServiceAccount and binding, and every
read-only token stops working.`,
		Example: `  labctl mgmt kubeconfig > ~/.kube/lab
  labctl mgmt kubeconfig --write ~/.kube/lab
  labctl mgmt kubeconfig --merge && kubectl get nodes
  labctl mgmt kubeconfig --read-only --ttl 2h --write ~/.kube/lab-view
  labctl mgmt kubeconfig --revoke`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.ReadOnly.check(cmd); err != nil {
				return err
			}
			return run(cmd.Context(), &o)
		},
	}
	addKubeconfigExportFlags(c, &o.Export)
	addReadOnlyFlags(c, &o.ReadOnly)
	return c
}
