package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
)

func newImageCmd(f *cmdutil.Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Build and list node VM templates",
		Long: `Node images are VM templates built by kubernetes-sigs/image-builder with
Packer, at the Kubernetes version pinned in labctl. Templates are tagged
"labctl", "labctl-image-<name>" and "kubernetes-<version>", so 'cluster
create' finds them by tag without any state file.

Images are built on Proxmox hypervisors only. Images for libvirt hosts come
in a later release.`,
		Example: "  labctl image build --image-builder ~/src/image-builder\n  labctl image list",
	}
	c.AddCommand(newImageBuildCmd(f), newImageListCmd(f))
	return c
}
