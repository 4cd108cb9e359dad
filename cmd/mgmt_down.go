package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/mgmt"
)

// newMgmtDownCmd hands its run mgmt.DownOptions with the command line's
// fields set; the run adds what it reaches.
func newMgmtDownCmd(f *cmdutil.Factory, runF runFunc[mgmt.DownOptions]) *cobra.Command {
	var o mgmt.DownOptions
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *mgmt.DownOptions) error {
		o.IO, o.Lab, o.Driver, o.Mgmt = f.IO, lab, f.Driver, f.OwnMgmt
		return mgmt.Down(ctx, *o)
	}))
	c := &cobra.Command{
		Use:   "down",
		Short: "Delete the management VM (only VMs labctl tagged for this lab)",
		Long: `Stop and delete the VMs labctl created for this lab's management cluster.
VMs without labctl's tag for this lab are never touched. Asks first unless
--yes is given; without a terminal to ask on, --yes is needed.

First it asks the management cluster for Cluster API Clusters: their VMs
would be left behind with nothing that knows them, so it refuses while any
exist, and lists them. --cascade deletes them first, as 'labctl cluster
delete' does (through Cluster API, with their VMs), waits until their VMs
are gone from the hypervisors themselves, then deletes the management VM.

Nothing of the management VM is deleted before every workload cluster's
VMs are gone; a VM a provider lost track of is named, and the management
VM kept, so 'labctl gc' or a re-run can finish.`,
		Example: `  labctl mgmt down
  labctl mgmt down --dry-run
  labctl mgmt down --cascade --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), &o)
		},
	}
	addDryRunFlag(c, &o.DryRun)
	addYesFlag(c, &o.Yes)
	c.Flags().BoolVar(&o.Cascade, "cascade", false, "delete the workload clusters first (through Cluster API, with their VMs) and wait until their VMs are gone")
	// --delete-clusters was --cascade's first name.
	c.Flags().BoolVar(&o.Cascade, "delete-clusters", false, "")
	_ = c.Flags().MarkDeprecated("delete-clusters", "use --cascade")
	c.Flags().BoolVar(&o.SkipClusterCheck, "skip-cluster-check", false, "do not ask the management cluster for workload clusters (when it no longer answers); their VMs are left behind")
	c.Flags().DurationVar(&o.Timeout, "timeout", cluster.DefaultTimeout, "bound on each wait while the workload clusters and their VMs go")
	return c
}
