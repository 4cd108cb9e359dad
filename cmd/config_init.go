package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/configfile"
)

func newConfigInitCmd(f *cmdutil.Factory) *cobra.Command {
	var dryRun, force, local bool
	var proxmoxURL string
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
			if proxmoxURL != "" {
				if _, err := configfile.ProxmoxURL(proxmoxURL); err != nil {
					return usageError{err}
				}
			}
			return configfile.Init(configfile.InitOptions{IO: f.IO, Path: f.Settings.Config, Force: force, DryRun: dryRun, Local: local, Proxmox: proxmoxURL})
		},
	}
	c.Flags().BoolVar(&force, "force", false, "overwrite an existing file")
	c.Flags().BoolVar(&local, "local", false, "write the one-machine libvirt lab (qemu:///system, NAT network) instead of a Proxmox one")
	c.Flags().StringVar(&proxmoxURL, "proxmox", "", "the Proxmox VE API URL to write, e.g. https://pve1.lan:8006")
	c.MarkFlagsMutuallyExclusive("local", "proxmox")
	addDryRunFlag(c, &dryRun)
	return c
}
