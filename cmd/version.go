package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/versioninfo"
)

// newVersionCmd hands its run versioninfo.VersionOptions with the command
// line's fields set; the run adds the streams.
func newVersionCmd(f *cmdutil.Factory, runF runFunc[versioninfo.VersionOptions]) *cobra.Command {
	var o versioninfo.VersionOptions
	run := orRun(runF, func(_ context.Context, o *versioninfo.VersionOptions) error {
		o.IO = f.IO
		return versioninfo.Version(*o)
	})
	c := &cobra.Command{
		Use:   "version",
		Short: "Print labctl's version and every upstream version it pins",
		Long: `Print labctl's own version and every upstream version compiled into it
(embedded/versions.yaml): k3s, cert-manager, cluster-api-operator, Cluster
API, CAPMOX, in-cluster IPAM, cluster-autoscaler, Cilium, kube-vip,
Kubernetes and the Ubuntu cloud image. labctl never installs "latest".`,
		Example: "  labctl version\n  labctl version -o json",
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
