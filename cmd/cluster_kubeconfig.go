package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/kube"
)

func newClusterKubeconfigCmd(f *cmdutil.Factory) *cobra.Command {
	var export kube.ExportOptions
	var ro readOnlyFlags
	c := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print a workload cluster's kubeconfig, write it to a file, or merge it",
		Long: `Print the cluster's admin kubeconfig (from the <cluster>-kubeconfig secret
Cluster API keeps) on stdout, or write it with mode 0600 to the file --write
names (never over an existing file without --force), or --merge it into
~/.kube/config (or the file kubectl writes to under $KUBECONFIG) as context
labctl-<lab>-<cluster>, made current; the other contexts stay.

--read-only hands out a kubeconfig that can only look, for everyday use:
ServiceAccount kube-system/labctl-readonly bound to ClusterRole view (which
reads no Secrets), with a token that expires after --ttl. --revoke deletes
that ServiceAccount and binding, and every read-only token stops working.`,
		Example:           "  labctl cluster kubeconfig lab1 > lab1.kubeconfig\n  labctl cluster kubeconfig lab1 --write ~/.kube/lab1\n  labctl cluster kubeconfig lab1 --merge && kubectl get nodes\n  labctl cluster kubeconfig lab1 --read-only --ttl 8h --write ~/.kube/lab1-view\n  labctl cluster kubeconfig lab1 --revoke",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: labNames(f, clusterNames),
		PreRunE:           func(cmd *cobra.Command, _ []string) error { return ro.check(cmd) },
		RunE: oneCluster(f, false, &ro.dryRun, func(cmd *cobra.Command, o cluster.Options) error {
			if ro.on() {
				return cluster.ReadOnlyKubeconfig(cmd.Context(), o, export, ro.request())
			}
			return cluster.ExportKubeconfig(cmd.Context(), o, export)
		}),
	}
	addKubeconfigExportFlags(c, &export)
	addReadOnlyFlags(c, &ro)
	// --file was this command's name for --write; it overwrote files.
	c.Flags().StringVarP(&export.Write, "file", "f", "", "")
	_ = c.Flags().MarkDeprecated("file", "use --write (it never overwrites without --force)")
	return c
}
