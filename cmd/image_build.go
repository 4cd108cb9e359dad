package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/imagebuild"
)

// newImageBuildCmd hands its run imagebuild.BuildOptions with the command
// line's fields set; the run adds what it reaches.
func newImageBuildCmd(f *cmdutil.Factory, runF runFunc[imagebuild.BuildOptions]) *cobra.Command {
	var o imagebuild.BuildOptions
	run := orRun(runF, withLabFrom(f, func(ctx context.Context, lab *config.Lab, src config.Source, o *imagebuild.BuildOptions) error {
		o.IO, o.Lab, o.Source, o.Driver, o.Verbose = f.IO, lab, src, f.Driver, f.Settings.Verbose
		return imagebuild.Build(ctx, *o)
	}))
	c := &cobra.Command{
		Use:   "build [NAME]",
		Short: "Build the images in lab.yaml (all of them without NAME)",
		Long: `Build each image in lab.yaml (or only NAME) with kubernetes-sigs/image-builder.

On a Proxmox VE hypervisor: image-builder's Proxmox target
(build-proxmox-<os>, e.g. build-proxmox-ubuntu-2404), then labctl tags the
template. labctl writes a Packer variable file (Kubernetes version, node,
storage pools, bridge, VLAN, vmid) and hands it to image-builder through
PACKER_VAR_FILES. The Proxmox URL, token ID and token secret reach the build
only through the child's environment (PROXMOX_URL, PROXMOX_USERNAME,
PROXMOX_TOKEN, ...); the secret is scrubbed from everything shown or logged.
An image whose template already carries its tags is up to date.

On libvirt hosts: image-builder's QEMU target (build-qemu-<os>) builds a
qcow2 on this machine, in image-builder's output/<name>-<version> folder;
labctl then uploads it into the storage pool of each host in
images[].hosts (every libvirt hypervisor by default) as the volume
<name>-<version>.qcow2, reads it back and checks its sha256, and only then
marks it verified. A host whose volume carries that mark and has the
qcow2's size is skipped (--verify reads it back and hashes it too). A
volume an upload left half done is replaced; one holding another verified
build is never replaced, as VMs may be backed by it.

The full log goes to $XDG_CONFIG_HOME/labctl/<lab>/images/<name>-<time>.log
(mode 0600). image-builder is a checkout of kubernetes-sigs/image-builder at
the pinned tag ('labctl version' lists it), given by --image-builder or
images[].imageBuilder. It needs make, python3, ansible-playbook and the
packer version it pins ('make deps-proxmox' or 'make deps-qemu' in
images/capi installs them), and qemu-system-x86_64 and qemu-img for QEMU
builds.

--kubernetes-version builds the image at another Kubernetes version than
images[].kubernetesVersion says, under the same image name: the node image
'labctl cluster upgrade NAME --to VERSION' looks for (a template tagged
kubernetes-<version>, or the volume <name>-<version>.qcow2).

--dry-run prints the variable file, the names of the environment variables
(never their values) and the exact command, checks what exists, and builds
and uploads nothing.`,
		Example: `  labctl image build --image-builder ~/src/image-builder
  labctl image build ubuntu-2404-kube --dry-run
  labctl image build ubuntu-2404-kube --kubernetes-version v1.35.4`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: labNames(f, imageNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.Name = args[0]
			}
			return run(cmd.Context(), &o)
		},
	}
	addDryRunFlag(c, &o.DryRun)
	c.Flags().StringVar(&o.ImageBuilder, "image-builder", "", "kubernetes-sigs/image-builder checkout at the pinned tag (overrides images[].imageBuilder)")
	_ = c.MarkFlagDirname("image-builder")
	c.Flags().StringVar(&o.KubernetesVersion, "kubernetes-version", "", "build at this Kubernetes version (e.g. v1.35.4) instead of images[].kubernetesVersion")
	c.Flags().BoolVar(&o.Verify, "verify", false, "libvirt hosts: read back every volume that looks complete and check its sha256 (as long as an upload)")
	return c
}
