package cmd

import "github.com/spf13/cobra"

func newImageCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Build and list node VM templates",
		Long: `Node images are VM templates built by kubernetes-sigs/image-builder with
Packer, at the Kubernetes version pinned in labctl. Templates are tagged
"labctl", the image name and the Kubernetes version, so 'cluster create'
finds them by tag without any state file.

Images for libvirt hosts come in a later release.`,
	}
	var build changeFlags
	var listOut string
	buildCmd := &cobra.Command{
		Use:   "build [NAME]",
		Short: "Build the images in lab.yaml (all of them without NAME)",
		Example: `  labctl image build
  labctl image build ubuntu-2404-kube --dry-run`,
		Args: cobra.MaximumNArgs(1),
		RunE: notImplemented,
	}
	addChangeFlags(buildCmd, &build)
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List the templates on the hypervisors with their tags",
		Args:  cobra.NoArgs,
		RunE:  notImplemented,
	}
	addOutputFlag(listCmd, &listOut)
	c.AddCommand(buildCmd, listCmd)
	return c
}
