package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/mgmt"
)

func newMgmtUpCmd(f *cmdutil.Factory) *cobra.Command {
	var dryRun bool
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
			lab, src, err := f.Lab(cmd.Context())
			if err != nil {
				return err
			}
			v := f.Settings.Verbose
			return mgmt.Up(cmd.Context(), mgmt.UpOptions{
				IO: f.IO, Lab: lab, Source: src, DryRun: dryRun, Verbose: v, Driver: f.Driver,
				Installer: &mgmt.StackInstaller{IO: f.IO, Verbose: v, Connect: f.Connect},
			})
		},
	}
	addDryRunFlag(c, &dryRun)
	return c
}
