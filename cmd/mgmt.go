package cmd

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/mgmt"
)

// installFlags are the flags of 'mgmt install'.
type installFlags struct {
	DryRun     bool
	Output     string
	OfflineDir string
	Emit       string
	Charts     string
	Timeout    time.Duration
	Wait       bool
}

func newMgmtCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "mgmt",
		Short: "Create and run the k3s management cluster",
		Long: `The management cluster is a k3s VM that runs cert-manager, the Cluster API
operator and providers, and one cluster-autoscaler per workload cluster.
It must run permanently, which is why it is a VM and not kind.

Its kubeconfig is stored with mode 0600 at
$XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig.`,
	}
	var up, down changeFlags
	var deleteClusters, skipClusterCheck bool
	var downTimeout time.Duration
	var statusOut string
	upCmd := &cobra.Command{
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
			return mgmt.Up(cmd.Context(), mgmt.UpOptions{
				IO: g.IO, Request: g.configRequest(), DryRun: up.DryRun, Verbose: g.Verbose,
				Installer: &mgmt.StackInstaller{IO: g.IO, Verbose: g.Verbose},
			})
		},
	}
	addChangeFlags(upCmd, &up)
	var inst installFlags
	installCmd := &cobra.Command{
		Use:   "install",
		Short: "Install cert-manager, Cluster API and the autoscaler parts onto a cluster",
		Long: `Install the management stack onto the lab's management cluster (or the
cluster --kubeconfig names), in order, waiting for each piece:

  1. cert-manager             Helm chart, with its CRDs
  2. cluster-api-operator     Helm chart
  3. Cluster API providers    operator Provider CRs: core cluster-api, kubeadm
                              bootstrap and control plane, proxmox (CAPMOX, with
                              its credentials Secret, when the lab has a Proxmox
                              hypervisor), in-cluster IPAM, and libvirt and
                              kamaji where management.stack enables them
  4. cluster-autoscaler RBAC  the namespace and RBAC every per-cluster
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
			if err := checkOutput(inst.Output); err != nil {
				return err
			}
			if !slices.Contains(mgmt.ChartModes, mgmt.ChartMode(inst.Charts)) {
				return usageError{fmt.Errorf("--charts %q: must be one of auto, helm-controller, helm-sdk", inst.Charts)}
			}
			if inst.Timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %s: must be more than 0, e.g. 10m", inst.Timeout)}
			}
			return mgmt.Install(cmd.Context(), mgmt.InstallOptions{
				IO: g.IO, Config: g.configRequest(), Kubeconfig: g.Kubeconfig, Verbose: g.Verbose,
				DryRun: inst.DryRun, Output: inst.Output, OfflineDir: inst.OfflineDir,
				Charts: mgmt.ChartMode(inst.Charts), Timeout: inst.Timeout, NoWait: !inst.Wait,
				EmitK3sManifests: inst.Emit,
			})
		},
	}
	f := installCmd.Flags()
	f.BoolVar(&inst.DryRun, "dry-run", false, "show what would change (and with -o yaml|json every object), change nothing")
	f.StringVarP(&inst.Output, "output", "o", "text", "with --dry-run: text (the plan) or yaml/json (every object, on stdout)")
	f.StringVar(&inst.OfflineDir, "offline-dir", "", "air-gapped: take charts and provider components from this folder (also management.stack.offlineDir)")
	f.StringVar(&inst.Emit, "emit-k3s-manifests", "", "write the HelmChart manifests for k3s's auto-deploy folder to this folder, and do nothing else")
	f.StringVar(&inst.Charts, "charts", string(mgmt.Auto), "how charts go in: auto, helm-controller (k3s HelmCharts) or helm-sdk")
	f.DurationVar(&inst.Timeout, "timeout", mgmt.DefaultTimeout, "how long to wait for each component to be ready")
	f.BoolVar(&inst.Wait, "wait", true, "wait for each component to be ready (--wait=false only waits for the CRDs the next steps need)")
	_ = installCmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	_ = installCmd.RegisterFlagCompletionFunc("charts", cobra.FixedCompletions([]string{"auto", "helm-controller", "helm-sdk"}, cobra.ShellCompDirectiveNoFileComp))
	_ = installCmd.MarkFlagDirname("offline-dir")
	_ = installCmd.MarkFlagDirname("emit-k3s-manifests")

	statusCmd := &cobra.Command{
		Use:   "status",
		Short: "Show each management component: wanted and installed version, readiness",
		Long: `Read each component of the management stack back from the cluster: the
version labctl wants, the version installed (the Helm release's chart version,
the Provider's status.installedVersion, the RBAC's version label), whether it
is ready, and why not. Works for charts installed by k3s's helm-controller and
by the Helm SDK alike. Only reads; needs no secret.

Exits 0 when every component is ready, 1 when one is not.`,
		Example: `  labctl mgmt status
  labctl mgmt status --kubeconfig ~/.kube/other -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(statusOut); err != nil {
				return err
			}
			_, err := mgmt.Status(cmd.Context(), mgmt.StatusOptions{
				IO: g.IO, Config: g.configRequest(), Kubeconfig: g.Kubeconfig,
				Output: statusOut, Verbose: g.Verbose,
			})
			if errors.Is(err, mgmt.ErrNotReady) {
				return codeError{exitError}
			}
			return err
		},
	}
	addOutputFlag(statusCmd, &statusOut)
	var export kube.ExportOptions
	kubeconfigCmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the management cluster's kubeconfig, write it to a file, or merge it",
		Long: `Print the kubeconfig mgmt up stored at
$XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig, or write it (mode 0600) to
the file --write names (never over an existing file without --force), or
--merge it into ~/.kube/config (or the file kubectl writes to under
$KUBECONFIG) as context labctl-<lab>-mgmt, made current; the other contexts
stay.`,
		Example: `  labctl mgmt kubeconfig > ~/.kube/lab
  labctl mgmt kubeconfig --write ~/.kube/lab
  labctl mgmt kubeconfig --merge && kubectl get nodes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return mgmt.Kubeconfig(cmd.Context(), mgmt.KubeconfigOptions{
				IO: g.IO, Request: g.configRequest(), Path: export.Write, Force: export.Force, Merge: export.Merge,
			})
		},
	}
	addKubeconfigExportFlags(kubeconfigCmd, &export)
	downCmd := &cobra.Command{
		Use:   "down",
		Short: "Delete the management VM (only VMs labctl tagged for this lab)",
		Long: `Stop and delete the VMs labctl created for this lab's management cluster.
VMs without labctl's tag for this lab are never touched. Asks first unless
--yes is given.

First it asks the management cluster for Cluster API Clusters: their VMs
would be left behind with nothing that knows them, so it refuses while any
exist, and lists them. --delete-clusters deletes them through Cluster API
(with their VMs) and waits, then deletes the management VM.`,
		Example: `  labctl mgmt down
  labctl mgmt down --dry-run
  labctl mgmt down --delete-clusters --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return mgmt.Down(cmd.Context(), mgmt.DownOptions{
				IO: g.IO, Request: g.configRequest(), DryRun: down.DryRun, Yes: down.Yes,
				Kubeconfig: g.Kubeconfig, DeleteClusters: deleteClusters, SkipClusterCheck: skipClusterCheck, Timeout: downTimeout,
			})
		},
	}
	addChangeFlags(downCmd, &down)
	downCmd.Flags().BoolVar(&deleteClusters, "delete-clusters", false, "delete the workload clusters through Cluster API first, and wait for them to go")
	downCmd.Flags().BoolVar(&skipClusterCheck, "skip-cluster-check", false, "do not ask the management cluster for workload clusters (when it no longer answers); their VMs are left behind")
	downCmd.Flags().DurationVar(&downTimeout, "timeout", cluster.DefaultTimeout, "bound on each wait while a workload cluster is deleted")
	c.AddCommand(upCmd, installCmd, statusCmd, kubeconfigCmd, downCmd)
	return c
}
