package cmd

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/configfile"
)

func (g *Globals) configRequest() config.Request {
	return config.Request{Path: g.Config, Explicit: g.configExplicit, Stdin: g.IO.In}
}

func newConfigCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Write, check and show lab.yaml",
		Long: `lab.yaml (apiVersion labctl.dev/v1alpha1, kind Lab) describes the whole lab:
hypervisors, network, the management VM, node images, workload clusters and
scale-test settings. labctl reads it from --config/-c, else LABCTL_CONFIG,
else ./lab.yaml, else its built-in one-machine example (local-kvm).

Secrets never go in the file: it names the environment variable or file that
holds each one.`,
	}

	var initOpts changeFlags
	var force, local bool
	var proxmoxURL string
	initCmd := &cobra.Command{
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
			return configfile.Init(configfile.InitOptions{IO: g.IO, Path: g.Config, Force: force, DryRun: initOpts.DryRun, Local: local, Proxmox: proxmoxURL})
		},
	}
	initCmd.Flags().BoolVar(&force, "force", false, "overwrite an existing file")
	initCmd.Flags().BoolVar(&local, "local", false, "write the one-machine libvirt lab (qemu:///system, NAT network) instead of a Proxmox one")
	initCmd.Flags().StringVar(&proxmoxURL, "proxmox", "", "the Proxmox VE API URL to write, e.g. https://pve1.lan:8006")
	initCmd.MarkFlagsMutuallyExclusive("local", "proxmox")
	addChangeFlags(initCmd, &initOpts)

	validateCmd := &cobra.Command{
		Use:   "validate",
		Short: "Check lab.yaml and report every problem at once",
		Long: `Check lab.yaml: strict fields, types, addresses, references and secrets.
Every problem is reported at once with its file, line, field path and fix.
Exits 0 when valid, 1 when not.`,
		Example: "  labctl config validate -c examples/lab.yaml\n  labctl config view | labctl config validate -c -",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := configfile.Validate(cmd.Context(), configfile.ValidateOptions{IO: g.IO, Request: g.configRequest()})
			if errors.Is(err, configfile.ErrInvalid) {
				return codeError{exitError}
			}
			return err
		},
	}

	var viewOut string
	viewCmd := &cobra.Command{
		Use:   "view",
		Short: "Print lab.yaml with every default filled in",
		Long: `Print the fully defaulted lab config. Secrets appear only as the env/file
references lab.yaml holds. The output is itself a valid lab.yaml, so it can
be saved or piped back in; which source was read goes to stderr.
'labctl config view > lab.yaml' works: the file stdout goes to is never read
as the config, so the emptied ./lab.yaml gives way to the built-in lab.`,
		Example: "  labctl config view -c examples/lab.yaml\n  labctl config view -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if viewOut == "text" {
				viewOut = "yaml"
			}
			if err := checkOutput(viewOut); err != nil {
				return err
			}
			return configfile.View(cmd.Context(), configfile.ViewOptions{IO: g.IO, Request: g.configRequest(), Output: viewOut})
		},
	}
	viewCmd.Flags().StringVarP(&viewOut, "output", "o", "yaml", "output format: yaml or json")

	c.AddCommand(initCmd, validateCmd, viewCmd)
	return c
}
