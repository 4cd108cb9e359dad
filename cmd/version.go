package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/versioninfo"
)

func newVersionCmd(f *cmdutil.Factory) *cobra.Command {
	var out string
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
			if err := checkOutput(out); err != nil {
				return err
			}
			return versioninfo.Version(versioninfo.VersionOptions{IO: f.IO, Output: out})
		},
	}
	addOutputFlag(c, &out)
	readsOnly(c)
	return c
}
