package cmd

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/doctor"
)

// newDoctorCmd hands its run doctor.Options with the command line's fields
// set (Kubeconfig from --kubeconfig); the run adds the streams and the
// lab's loader: doctor loads the lab itself, as its first check.
func newDoctorCmd(f *cmdutil.Factory, runF runFunc[doctor.Options]) *cobra.Command {
	var o doctor.Options
	run := orRun(runF, func(ctx context.Context, o *doctor.Options) error {
		o.IO, o.LoadLab = f.IO, f.Lab
		_, err := doctor.Run(ctx, *o)
		if errors.Is(err, doctor.ErrFailed) {
			return codeError{exitError}
		}
		return err
	})
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Check that labctl has what it needs here",
		Long: `Check, without changing anything, that labctl can do its job from here:

  config                the lab config loads and validates (and which file it was)
  proxmox <name> ...    each Proxmox token secret reference resolves: the env
                        variable is set, or the file exists, is readable and
                        is not wider than mode 0600 (the secret is never shown)
  ssh public key        the management VM's public key file exists
  proxmox <name> api    the PVE API answers, TLS holds, the token is accepted
  proxmox <name> privileges
                        the token has every privilege labctl and CAPMOX need;
                        each missing one is listed by path and privilege
  proxmox <name> nodes, storage, bridge
                        the nodes exist, storages hold images / import / iso,
                        the bridge exists
  cluster <name> template
                        the cluster's VM template exists
  cluster <name> memory CAPMOX's memory arithmetic: per node, total ×
                        memoryAdjustment% − configured memory of every
                        non-template VM (stopped ones too); prints the largest
                        worker count that fits
  libvirt support       the libvirt client built into labctl
  libvirt <name>        the host's libvirtd answers at the lab's URI
  libvirt <name> pool, network
                        the storage pool and NAT network exist and are active
                        (missing or stopped: a warning, mgmt up makes them)
  libvirt <name> virtualisation
                        VMs get KVM, or only TCG (a warning: much slower)
  management cluster    the kubeconfig from --kubeconfig (or LABCTL_KUBECONFIG),
                        else $KUBECONFIG, else the one stored at
                        $XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig, reaches
                        the API server (and its version)
  cluster api           Cluster API's CRDs are installed and established
  cluster-api-operator  the operator's provider CRDs are installed

Each check is ok, warn or fail. labctl doctor exits 1 when any check fails.`,
		Example: "  labctl doctor\n  labctl doctor -c examples/lab.yaml -o json\n  labctl doctor --kubeconfig ~/.kube/mgmt.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			o.Kubeconfig = f.Settings.Kubeconfig
			return run(cmd.Context(), &o)
		},
	}
	addOutputFlag(c, &o.Output)
	c.Flags().BoolVar(&o.SkipHypervisors, "skip-hypervisors", false, "do not call the Proxmox API or libvirt (config and local checks only)")
	readsOnly(c)
	return c
}
