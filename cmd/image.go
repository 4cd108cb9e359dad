package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
)

func newImageCmd(f *cmdutil.Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Build and list node VM templates",
		Long: `Node images are built by kubernetes-sigs/image-builder with Packer, at the
Kubernetes version pinned in labctl.

On Proxmox VE they are VM templates tagged "labctl", "labctl-image-<name>"
and "kubernetes-<version>", so 'cluster create' finds them by tag without
any state file. On libvirt hosts they are the storage volume
<name>-<version>.qcow2 in each host's pool, with a marker volume
<name>-<version>.qcow2.sha256-<hex> once its upload was checked.

'image list' shows the Proxmox templates.`,
		Example: "  labctl image build --image-builder ~/src/image-builder\n  labctl image list",
	}
	c.AddCommand(newImageBuildCmd(f, nil), newImageListCmd(f, nil))
	return c
}
