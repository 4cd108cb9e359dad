package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/configfile"
)

// newConfigInitCmd hands its run configfile.InitOptions with the command
// line's fields set (Path from --config); the run adds the streams.
func newConfigInitCmd(f *cmdutil.Factory, runF runFunc[configfile.InitOptions]) *cobra.Command {
	var o configfile.InitOptions
	run := orRun(runF, func(_ context.Context, o *configfile.InitOptions) error {
		o.IO = f.IO
		return configfile.Init(*o)
	})
	c := &cobra.Command{
		Use:   "init",
		Short: "Write a commented starter lab.yaml",
		Long: `Write a commented starter lab.yaml (mode 0600) to the --config path
(./lab.yaml by default, - for stdout). An existing file is left alone unless
--force.

By default it is a Proxmox VE lab whose site values (API URL, node, network,
addresses) are placeholders marked "# CHANGE ME"; --proxmox fills in the API
URL. --local writes the one-machine libvirt lab instead (the built-in
local-kvm one). Whatever is written passes 'labctl config validate' as it is.`,
		Example: "  labctl config init --local\n  labctl config init --proxmox https://pve1.lan:8006\n  labctl config init -c ~/lab/lab.yaml\n  labctl config init -c - | less",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Proxmox != "" {
				if _, err := configfile.ProxmoxURL(o.Proxmox); err != nil {
					return usageError{err}
				}
			}
			o.Path = f.Settings.Config
			return run(cmd.Context(), &o)
		},
	}
	c.Flags().BoolVar(&o.Force, "force", false, "overwrite an existing file")
	c.Flags().BoolVar(&o.Local, "local", false, "write the one-machine libvirt lab (qemu:///system, NAT network) instead of a Proxmox one")
	c.Flags().StringVar(&o.Proxmox, "proxmox", "", "the Proxmox VE API URL to write, e.g. https://pve1.lan:8006")
	c.MarkFlagsMutuallyExclusive("local", "proxmox")
	addDryRunFlag(c, &o.DryRun)
	return c
}
