package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/mgmt"
)

// newMgmtUpgradeCmd hands its run mgmt.UpgradeOptions with the command
// line's fields set; the run adds what it reaches.
func newMgmtUpgradeCmd(f *cmdutil.Factory, runF runFunc[mgmt.UpgradeOptions]) *cobra.Command {
	var (
		o    mgmt.UpgradeOptions
		mode string
	)
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *mgmt.UpgradeOptions) error {
		o.IO, o.Lab, o.Mgmt, o.Verbose = f.IO, lab, f.Mgmt, f.Settings.Verbose
		_, err := mgmt.Upgrade(ctx, *o)
		return err
	}))
	c := &cobra.Command{
		Use:   "upgrade",
		Short: "Move the management cluster to the versions this labctl pins, planned first",
		Long: `Upgrade the management cluster to the versions this labctl binary pins
('labctl version' lists them). It reads what runs, the way 'mgmt status'
does, and prints the plan before changing anything:

  COMPONENT                 FROM           TO             ACTION
  k3s                       v1.35.3+k3s1   v1.35.4+k3s1   upgrade
  cert-manager              v1.21.1        v1.21.2        upgrade
  CoreProvider cluster-api  v1.12.10       v1.12.11       upgrade
  ...

and, for each component that moves, what the step does and what it
interrupts. Then it asks (--yes skips the question; without a terminal,
--yes is needed). --dry-run prints the plan only.

The steps run in order, each waiting for its component to be Ready before
the next:
  1. k3s on the management VM: its install script at the pinned tag, run
     over SSH with the host key labctl gave the VM; k3s restarts in place
     and the stored kubeconfig keeps working
  2. cert-manager and cluster-api-operator: helm upgrade
  3. each provider: the operator's Provider spec.version (the operator
     replaces the provider's components; no Machine is replaced)
  4. each cluster's cluster-autoscaler, where its minor matches the
     cluster's Kubernetes (else 'labctl cluster upgrade' moves it)

It refuses, before changing anything, a downgrade (something runs newer
than the pin), a jump of more than one minor where the component upgrades
one minor at a time (k3s, cert-manager), and providers whose Cluster API
contracts do not fit the core provider's (read from each provider's
metadata.yaml releaseSeries, as clusterctl does).

There is no state file: every step reads the cluster first, so after
Ctrl-C or a failure a re-run carries on where it stopped, and on an
upgraded cluster it writes nothing. 'mgmt install' installs what is
missing but leaves running components alone when their version moved:
that is this command's job.`,
		Example: `  labctl mgmt upgrade --dry-run
  labctl mgmt upgrade
  labctl mgmt upgrade --yes --timeout 20m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkStackFlags(mode, o.Timeout); err != nil {
				return err
			}
			o.Charts = mgmt.ChartMode(mode)
			return run(cmd.Context(), &o)
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.DryRun, "dry-run", false, "print the plan, change nothing")
	changesThings(c)
	addYesFlag(c, &o.Yes)
	fl.StringVar(&o.OfflineDir, "offline-dir", "", "air-gapped: take charts and provider components from this folder (also management.stack.offlineDir)")
	fl.StringVar(&mode, "charts", string(mgmt.Auto), "how charts go in: auto, helm-controller (k3s HelmCharts) or helm-sdk")
	fl.DurationVar(&o.Timeout, "timeout", mgmt.DefaultTimeout, "how long to wait for each component to be ready")
	_ = c.RegisterFlagCompletionFunc("charts", cobra.FixedCompletions([]string{"auto", "helm-controller", "helm-sdk"}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.MarkFlagDirname("offline-dir")
	return c
}
