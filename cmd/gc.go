package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/orphans"
)

// newGCCmd hands its run orphans.Options with the command line's fields
// set; the run adds what it reaches.
func newGCCmd(f *cmdutil.Factory, runF runFunc[orphans.Options]) *cobra.Command {
	var o orphans.Options
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *orphans.Options) error {
		o.IO, o.Lab, o.Mgmt, o.Driver = f.IO, lab, f.OwnMgmt, f.Driver
		return orphans.GC(ctx, *o)
	}))
	c := &cobra.Command{
		Use:   "gc",
		Short: "Find and delete what labctl made that nothing owns any more",
		Long: `Find what labctl and its providers made on the lab's hypervisors that
nothing owns any more, list each with the reason, ask, then delete it:

  - node VMs no ProxmoxMachine or LibvirtMachine names (a delete that
    failed half way, a machine whose finalizer was removed by hand), and
    VMs tagged for this lab that are not the management VM. Stopped ones
    too: CAPMOX counts their memory against the node;
  - VM disks and cloud-init seed ISOs no VM uses;
  - node templates (Proxmox) and node image volumes (libvirt) no
    cluster's templates use that are not the newest of their image.

A VM a Machine still names is never listed. A running VM is deleted only
with --force. Without a management cluster only what labctl's own marks
prove unowned is listed: no node VM, template or node image, as only the
management cluster's Machines say which are owned (docs/day2.md).

Every hypervisor is read at once, each within 10 s: one that does not
answer is named with its lab.yaml field, and the others go on. A re-run
finds what is left.`,
		Example: `  labctl gc --dry-run
  labctl gc -o json --dry-run
  labctl gc --yes
  labctl gc --yes --force      # running orphan VMs too`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return run(cmd.Context(), &o)
		},
	}
	addDryRunFlag(c, &o.DryRun)
	addYesFlag(c, &o.Yes)
	addOutputFlag(c, &o.Output)
	c.Flags().BoolVar(&o.Force, "force", false, "also stop and delete orphan VMs that run")
	return c
}
