package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/imagebuild"
)

// newImageListCmd hands its run imagebuild.ListOptions with the command
// line's fields set; the run adds what it reaches.
func newImageListCmd(f *cmdutil.Factory, runF runFunc[imagebuild.ListOptions]) *cobra.Command {
	var o imagebuild.ListOptions
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *imagebuild.ListOptions) error {
		o.IO, o.Lab, o.Driver = f.IO, lab, f.Driver
		return imagebuild.List(ctx, *o)
	}))
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
