package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/app"
	"github.com/labctl/labctl/internal/cmdutil"
)

func newConfigInitCmd(f *cmdutil.Factory) *cobra.Command {
	var dryRun, force bool
	c := &cobra.Command{
		Use:   "init",
		Short: "Write a commented starter lab.yaml",
		Long: `Write a commented starter lab.yaml to the --config path (./lab.yaml by
default, - for stdout). An existing file is left alone unless --force.`,
		Example: "  labctl config init\n  labctl config init -c ~/lab/lab.yaml\n  labctl config init -c - | less",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return app.ConfigInit(app.ConfigInitOptions{IO: f.IO, Path: f.Settings.Config, Force: force, DryRun: dryRun})
		},
	}
	c.Flags().BoolVar(&force, "force", false, "overwrite an existing file")
	addDryRunFlag(c, &dryRun)
	return c
}
