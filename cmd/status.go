package cmd

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/labstatus"
)

// newStatusCmd hands its run labstatus.Options with the command line's
// fields set; the run adds what it reaches.
func newStatusCmd(f *cmdutil.Factory, runF runFunc[labstatus.Options]) *cobra.Command {
	var o labstatus.Options
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *labstatus.Options) error {
		o.IO, o.Lab, o.Driver, o.Mgmt, o.Workload, o.Verbose = f.IO, lab, f.Driver, f.Mgmt, f.Workload, f.Settings.Verbose
		_, err := labstatus.Status(ctx, *o)
		if errors.Is(err, labstatus.ErrIncomplete) {
			return codeError{exitError}
		}
		return err
	}))
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the whole lab on one screen: hosts, management, images, clusters, orphans",
		Long: `Show the whole lab at once, read live:

  HYPERVISORS   each host of lab.yaml: reachable or not (and why, with the
                lab.yaml field to check), each node's CPUs, memory, memory
                used, and memory reserved as CAPMOX counts it: the configured
                memory of every VM that is not a template, stopped ones too
  MANAGEMENT    the management VM (running, stopped, missing) and its stack,
                each component as 'labctl mgmt status' shows it
  IMAGES        the node images on each host: Proxmox templates tagged
                labctl, libvirt pools' node image volumes
  CLUSTERS      each cluster: its control plane (kubeadm VMs or a Kamaji
                tenant), each pool's min, current and max machines, and its
                Nodes Ready, read from the cluster itself through the
                kubeconfig Secret Cluster API keeps
  ORPHANS       what 'labctl gc' would offer: VMs, volumes, seed ISOs and
                templates labctl made that nothing owns, with the memory
                each orphan VM still reserves

Every part is read at once, each within --timeout, so the screen comes
within that time: a host that is down or hung shows as unreachable and
holds up nothing else. It only reads, and prints no secret. -o json|yaml prints the same
report; docs/day2.md lists its fields.

Exits 0 when every part was read, 1 when one could not be (the screen says
which and why).`,
		Example: "  labctl status\n  labctl status -o json | jq '.hypervisors[] | select(.reachable | not)'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			if o.Timeout <= 0 {
				return usageError{errors.New("--timeout must be more than 0")}
			}
			return run(cmd.Context(), &o)
		},
	}
	readsOnly(c)
	addOutputFlag(c, &o.Output)
	c.Flags().DurationVar(&o.Timeout, "timeout", labstatus.DefaultTimeout, "how long each part (a host, the stack, a cluster's Nodes, the orphans) may take before it is shown as not answering")
	return c
}
