package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/mgmt"
)

// newMgmtUpCmd hands its run mgmt.UpOptions with the command line's
// fields set; the run adds what it reaches.
func newMgmtUpCmd(f *cmdutil.Factory, runF runFunc[mgmt.UpOptions]) *cobra.Command {
	var o mgmt.UpOptions
	run := orRun(runF, withLabFrom(f, func(ctx context.Context, lab *config.Lab, src config.Source, o *mgmt.UpOptions) error {
		v := f.Settings.Verbose
		o.IO, o.Lab, o.Source, o.Verbose, o.Driver = f.IO, lab, src, v, f.Driver
		o.Installer = &mgmt.StackInstaller{IO: f.IO, Verbose: v, Connect: f.Connect}
		return mgmt.Up(ctx, *o)
	}))
	c := &cobra.Command{
		Use:   "up",
		Short: "Create the management VM and install the management stack",
		Long: `Create the k3s management VM from the pinned Ubuntu cloud image with
cloud-init, wait for its API, store its kubeconfig and run 'mgmt install'.

Every step first looks at what exists: a second run changes nothing, and a
run that was interrupted picks up where it stopped.`,
		Example: `  labctl mgmt up -c lab.yaml
  labctl mgmt up --dry-run      # the built-in one-machine lab when there is no lab.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), &o)
		},
	}
	addDryRunFlag(c, &o.DryRun)
	return c
}
