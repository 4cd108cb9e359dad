package cmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
)

// clusterUpgradeOptions are what 'cluster upgrade' was asked; Upgrade's
// Options are filled in by the run.
type clusterUpgradeOptions struct {
	clusterArgs
	Upgrade cluster.UpgradeOptions
}

func newClusterUpgradeCmd(f *cmdutil.Factory, runF runFunc[clusterUpgradeOptions]) *cobra.Command {
	var o clusterUpgradeOptions
	run := orRun(runF, withCluster(f, true, func(ctx context.Context, co cluster.Options, o *clusterUpgradeOptions) error {
		co.Timeout = o.Upgrade.Timeout
		o.Upgrade.Options, o.Upgrade.Driver = co, f.Driver
		_, err := cluster.Upgrade(ctx, o.Upgrade)
		return err
	}))
	c := &cobra.Command{
		Use:   "upgrade NAME",
		Short: "Move a cluster to another Kubernetes version, planned first",
		Long: `Upgrade a workload cluster's Kubernetes to --to, by default the version this
labctl pins ('labctl version' lists it), replacing every machine.

Preflight, before anything changes:
  - the node image at the target exists on every host the cluster's
    machines boot on: the Proxmox template 'labctl image build' tags
    kubernetes-<version>, or the volume <image>-<version>.qcow2 on each
    libvirt host; if not, the error gives the 'labctl image build' line
  - kubeadm upgrades one minor at a time, nothing goes above v1.35 (the cap
    of Cluster API 1.12 with CAPMOX v0.9) or down, and every running
    kubelet stays within 3 minors of the new control plane

Then it prints the plan (each stage, with its machines), asks (--yes skips
the question) and rolls, each stage waiting until every machine of it runs
the target and its node is up:
  1. the control plane: the KubeadmControlPlane's version and a machine
     template at the new image; KCP brings the new machine up before it
     removes an old one
  2. each worker pool in turn: its MachineDeployment's version and
     templates, rolled one machine at a time (maxSurge 0, maxUnavailable 1,
     as the hosts have no room for an extra VM); a pool at zero changes
     without making a VM, and its next scale-up starts at the new version
  3. the cluster's cluster-autoscaler, whose minor follows Kubernetes'
  4. Cilium, when its pinned chart version moved

A Kamaji tenant rolls the same way from one change: its Cluster's topology
version and its pools' machines at the new image. Cluster API upgrades the
KamajiControlPlane first (Kamaji replaces the API server pods; no VM is
made), then each pool once; its Cilium and CoreDNS come again through its
ClusterResourceSet.

Each machine is shown as it is created, runs, and is deleted, with times.
The autoscaler keeps working throughout. A machine that does not run within
--timeout stops the roll, naming the Machine and why; labctl deletes
nothing itself, so the old templates the old machines need stay. Run the
same command again (after fixing the cause) to carry on: each stage reads
the cluster first, and finished ones are skipped.

--dry-run prints the plan and each stage's changes only.`,
		Example: `  labctl cluster upgrade lab1 --dry-run
  labctl cluster upgrade lab1
  labctl cluster upgrade lab1 --to v1.35.4 --yes
  labctl cluster upgrade tenant1 --dry-run`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: labNames(f, clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			if o.Upgrade.To != "" {
				if err := config.CheckKubernetesVersion(o.Upgrade.To); err != nil {
					return usageError{fmt.Errorf("--to: %w", err)}
				}
			}
			if o.Upgrade.Timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %s: must be more than 0, e.g. 30m", o.Upgrade.Timeout)}
			}
			return run(cmd.Context(), &o)
		},
	}
	c.Flags().StringVar(&o.Upgrade.To, "to", "", "the Kubernetes version to move to, e.g. v1.35.4 (default: the pinned version)")
	c.Flags().DurationVar(&o.Upgrade.Timeout, "timeout", cluster.DefaultTimeout, "how long each new machine may take to run, and each stage to finish")
	addDryRunFlag(c, &o.DryRun)
	addYesFlag(c, &o.Upgrade.Yes)
	return c
}
