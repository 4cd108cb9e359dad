package cmd

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/mgmt"
)

func newMgmtDownCmd(f *cmdutil.Factory) *cobra.Command {
	var dryRun, yes, cascade, skipClusterCheck bool
	var timeout time.Duration
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
			lab, _, err := f.Lab(cmd.Context())
			if err != nil {
				return err
			}
			return mgmt.Down(cmd.Context(), mgmt.DownOptions{
				IO: f.IO, Lab: lab, Driver: f.Driver, Mgmt: f.OwnMgmt, DryRun: dryRun, Yes: yes,
				Cascade: cascade, SkipClusterCheck: skipClusterCheck, Timeout: timeout,
			})
		},
	}
	addDryRunFlag(c, &dryRun)
	addYesFlag(c, &yes)
	c.Flags().BoolVar(&cascade, "cascade", false, "delete the workload clusters first (through Cluster API, with their VMs) and wait until their VMs are gone")
	// --delete-clusters was --cascade's first name.
	c.Flags().BoolVar(&cascade, "delete-clusters", false, "")
	_ = c.Flags().MarkDeprecated("delete-clusters", "use --cascade")
	c.Flags().BoolVar(&skipClusterCheck, "skip-cluster-check", false, "do not ask the management cluster for workload clusters (when it no longer answers); their VMs are left behind")
	c.Flags().DurationVar(&timeout, "timeout", cluster.DefaultTimeout, "bound on each wait while the workload clusters and their VMs go")
	return c
}
