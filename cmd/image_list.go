package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/imagebuild"
)

func newImageListCmd(f *cmdutil.Factory) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "list",
		Short: "List the node images on the hypervisors",
		Long: `List the VM templates tagged "labctl" on every Proxmox hypervisor in
lab.yaml, with their image name, Kubernetes version and tags, and the node
image volumes (<image>-<kubernetesVersion>.qcow2) 'image build' uploaded to
the storage pool of every libvirt host.`,
		Example: "  labctl image list\n  labctl image list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			lab, _, err := f.Lab(cmd.Context())
			if err != nil {
				return err
			}
			return imagebuild.List(cmd.Context(), imagebuild.ListOptions{IO: f.IO, Lab: lab, Driver: f.Driver, Output: out})
		},
	}
	addOutputFlag(c, &out)
	readsOnly(c)
	return c
}
