package cmd

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/mgmt"
)

// newMgmtInstallCmd hands its run mgmt.InstallOptions with the command
// line's fields set; the run adds what it reaches.
func newMgmtInstallCmd(f *cmdutil.Factory, runF runFunc[mgmt.InstallOptions]) *cobra.Command {
	var (
		o         mgmt.InstallOptions
		wait      bool
		out, mode string
	)
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *mgmt.InstallOptions) error {
		o.IO, o.Lab, o.Mgmt, o.Verbose = f.IO, lab, f.Mgmt, f.Settings.Verbose
		return mgmt.Install(ctx, *o)
	}))
	c := &cobra.Command{
		Use:   "install",
		Short: "Install cert-manager, Cluster API and the autoscaler parts onto a cluster",
		Long: `Install the management stack onto the lab's management cluster (or the
cluster --kubeconfig names), in order, waiting for each piece:

  1. cert-manager             Helm chart, with its CRDs
  2. cluster-api-operator     Helm chart
  3. Cluster API providers    operator Provider CRs: core cluster-api, kubeadm
                              bootstrap and control plane, proxmox (CAPMOX, with
                              its credentials Secret, when the lab has a Proxmox
                              hypervisor), in-cluster IPAM, and libvirt when a
                              cluster or pool is on a libvirt host or
                              management.stack enables it (labctl's own
                              provider: its components come from this binary,
                              at labctl's version)
  4. Kamaji, when the lab     Kamaji's chart (carried in this binary), its
     needs it                 datastore (the kamaji-etcd chart: one etcd on a
                              local-path volume) and the kamaji control-plane
                              provider (its components from this binary)
  5. cluster-autoscaler RBAC  the namespace and RBAC every per-cluster
                              autoscaler uses on the management cluster

Every version is pinned in labctl ('labctl version' lists them). Charts go in
through k3s's helm-controller (HelmChart objects) when the cluster has it,
else through the Helm SDK; --charts picks one. Objects go in with server-side
apply as field manager "labctl".

Each step first reads what is there and changes only what differs, so a
second run changes nothing and a failed run carries on where it stopped. A
step that times out names the object and the condition it waited for, and
leaves what it applied in place.

--emit-k3s-manifests DIR writes the HelmChart manifests for k3s's auto-deploy
folder instead, without a cluster. For an air-gapped lab, --offline-dir (or
management.stack.offlineDir) names a folder holding the chart archives
(<chart>-<version>.tgz) and each provider's release files in clusterctl's
layout (<type>-<name>/<version>/<type>-components.yaml and metadata.yaml);
labctl puts the providers in ConfigMaps the operator reads.

The Proxmox token secret is read from the env variable or file lab.yaml
names and only ever written into the CAPMOX Secret; dry runs show where it
comes from, never the value.`,
		Example: `  labctl mgmt install
  labctl mgmt install --kubeconfig ~/.kube/other --dry-run -o yaml
  labctl mgmt install --emit-k3s-manifests ./k3s-manifests
  labctl mgmt install --offline-dir /srv/labctl-offline --charts helm-sdk
  labctl mgmt install --timeout 20m -v`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if out != "text" && !o.DryRun {
				return usageError{fmt.Errorf("-o %s prints the objects of a dry run; add --dry-run", out)}
			}
			if err := checkStackFlags(mode, o.Timeout); err != nil {
				return err
			}
			o.Output, o.Charts, o.NoWait = out, mgmt.ChartMode(mode), !wait
			return run(cmd.Context(), &o)
		},
	}
	fl := c.Flags()
	fl.BoolVar(&o.DryRun, "dry-run", false, "show what would change (and with -o yaml|json every object), change nothing")
	changesThings(c)
	fl.StringVarP(&out, "output", "o", "text", "with --dry-run: text (the plan) or yaml/json (every object, on stdout)")
	fl.StringVar(&o.OfflineDir, "offline-dir", "", "air-gapped: take charts and provider components from this folder (also management.stack.offlineDir)")
	fl.StringVar(&o.EmitK3sManifests, "emit-k3s-manifests", "", "write the HelmChart manifests for k3s's auto-deploy folder to this folder, and do nothing else")
	fl.StringVar(&mode, "charts", string(mgmt.Auto), "how charts go in: auto, helm-controller (k3s HelmCharts) or helm-sdk")
	fl.DurationVar(&o.Timeout, "timeout", mgmt.DefaultTimeout, "how long to wait for each component to be ready")
	fl.BoolVar(&wait, "wait", true, "wait for each component to be ready (--wait=false only waits for the CRDs the next steps need)")
	completeOutput(c, "text", "json", "yaml")
	_ = c.RegisterFlagCompletionFunc("charts", cobra.FixedCompletions([]string{"auto", "helm-controller", "helm-sdk"}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.MarkFlagDirname("offline-dir")
	_ = c.MarkFlagDirname("emit-k3s-manifests")
	return c
}

// checkStackFlags checks the flags mgmt install and upgrade share.
func checkStackFlags(mode string, timeout time.Duration) error {
	if err := mgmt.ChartMode(mode).Check(); err != nil {
		return usageError{err}
	}
	if timeout <= 0 {
		return usageError{fmt.Errorf("--timeout %s: must be more than 0, e.g. 10m", timeout)}
	}
	return nil
}
