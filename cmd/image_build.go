package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/imagebuild"
)

func newImageBuildCmd(f *cmdutil.Factory) *cobra.Command {
	var dryRun bool
	var builderDir string
	c := &cobra.Command{
		Use:   "build [NAME]",
		Short: "Build the images in lab.yaml (all of them without NAME)",
		Long: `Build each image in lab.yaml (or only NAME) with image-builder's Proxmox
target (build-proxmox-<os>, e.g. build-proxmox-ubuntu-2404), then tag the
template on Proxmox.

labctl writes a Packer variable file (Kubernetes version, node, storage
pools, bridge, VLAN, vmid) and hands it to image-builder through
PACKER_VAR_FILES. The Proxmox URL, token ID and token secret reach the build
only through the child's environment (PROXMOX_URL, PROXMOX_USERNAME,
PROXMOX_TOKEN, ...); the secret is scrubbed from everything shown or logged.
The full log goes to $XDG_CONFIG_HOME/labctl/<lab>/images/<name>-<time>.log
(mode 0600).

image-builder is a checkout of kubernetes-sigs/image-builder at the pinned
tag ('labctl version' lists it), given by --image-builder or
images[].imageBuilder. It needs make, python3, ansible-playbook and the
packer version it pins ('make deps-proxmox' in images/capi installs them).

An image whose template already carries its tags is up to date. --dry-run
prints the variable file, the names of the environment variables (never
their values) and the exact command, and builds nothing.

Images for libvirt hosts come in a later release.`,
		Example: `  labctl image build --image-builder ~/src/image-builder
  labctl image build ubuntu-2404-kube --dry-run`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: labNames(f, imageNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			lab, src, err := f.Lab(cmd.Context())
			if err != nil {
				return err
			}
			o := imagebuild.BuildOptions{IO: f.IO, Lab: lab, Source: src, Driver: f.Driver,
				ImageBuilder: builderDir, DryRun: dryRun, Verbose: f.Settings.Verbose}
			if len(args) == 1 {
				o.Name = args[0]
			}
			return imagebuild.Build(cmd.Context(), o)
		},
	}
	addDryRunFlag(c, &dryRun)
	c.Flags().StringVar(&builderDir, "image-builder", "", "kubernetes-sigs/image-builder checkout at the pinned tag (overrides images[].imageBuilder)")
	_ = c.MarkFlagDirname("image-builder")
	return c
}
