package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/kube"
)

// kubeconfigOptions are what a kubeconfig command was asked: where the
// kubeconfig goes, and whether it is the admin one or a read-only one.
// Name is the cluster's, empty for the management cluster's.
type kubeconfigOptions struct {
	Name     string
	Export   kube.ExportOptions
	ReadOnly readOnlyFlags
}

func newClusterKubeconfigCmd(f *cmdutil.Factory, runF runFunc[kubeconfigOptions]) *cobra.Command {
	var o kubeconfigOptions
	run := orRun(runF, func(ctx context.Context, o *kubeconfigOptions) error {
		ro := o.ReadOnly
		opts, err := f.ClusterOptions(ctx, o.Name, false, ro.dryRun)
		if err != nil {
			return err
		}
		if ro.on() {
			return cluster.ReadOnlyKubeconfig(ctx, opts, o.Export, ro.request())
		}
		return cluster.ExportKubeconfig(ctx, opts, o.Export)
	})
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
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			if err := o.ReadOnly.check(cmd); err != nil {
				return err
			}
			return run(cmd.Context(), &o)
		},
	}
	addKubeconfigExportFlags(c, &o.Export)
	addReadOnlyFlags(c, &o.ReadOnly)
	// --file was this command's name for --write; it overwrote files.
	c.Flags().StringVarP(&o.Export.Write, "file", "f", "", "")
	_ = c.Flags().MarkDeprecated("file", "use --write (it never overwrites without --force)")
	return c
}
