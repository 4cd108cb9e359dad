package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/mgmt"
)

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
	var up, install, down changeFlags
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
			})
		},
	}
	addChangeFlags(upCmd, &up)
	installCmd := &cobra.Command{
		Use:   "install",
		Short: "Install cert-manager, Cluster API and the autoscaler parts onto a cluster",
		Long: `Install the management stack, in order, from manifests embedded in labctl:
cert-manager, cluster-api-operator, the provider CRs (core, kubeadm,
Proxmox, in-cluster IPAM) and the RBAC every cluster-autoscaler uses.
Waits for each piece; re-running changes nothing.`,
		Example: `  labctl mgmt install
  labctl mgmt install --kubeconfig ~/.kube/other --dry-run -o yaml`,
		Args: cobra.NoArgs,
		RunE: notImplemented,
	}
	addChangeFlags(installCmd, &install)
	statusCmd := &cobra.Command{
		Use:   "status",
		Short: "Show each management component: wanted and installed version, readiness",
		Args:  cobra.NoArgs,
		RunE:  notImplemented,
	}
	addOutputFlag(statusCmd, &statusOut)
	var kcPath string
	var kcForce bool
	kubeconfigCmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the management cluster's kubeconfig, or write it to a file",
		Long: `Print the kubeconfig mgmt up stored at
$XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig, or write it (mode 0600) to
the file --write names.`,
		Example: `  labctl mgmt kubeconfig > ~/.kube/lab
  labctl mgmt kubeconfig --write ~/.kube/lab`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return mgmt.Kubeconfig(cmd.Context(), mgmt.KubeconfigOptions{
				IO: g.IO, Request: g.configRequest(), Path: kcPath, Force: kcForce,
			})
		},
	}
	kubeconfigCmd.Flags().StringVar(&kcPath, "write", "", "write the kubeconfig to this file (mode 0600) instead of printing it")
	kubeconfigCmd.Flags().BoolVar(&kcForce, "force", false, "overwrite the file --write names")
	downCmd := &cobra.Command{
		Use:   "down",
		Short: "Delete the management VM (only VMs labctl tagged for this lab)",
		Long: `Stop and delete the VMs labctl created for this lab's management cluster.
VMs without labctl's tag for this lab are never touched. Asks first unless
--yes is given.`,
		Example: `  labctl mgmt down
  labctl mgmt down --dry-run
  labctl mgmt down --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return mgmt.Down(cmd.Context(), mgmt.DownOptions{
				IO: g.IO, Request: g.configRequest(), DryRun: down.DryRun, Yes: down.Yes,
			})
		},
	}
	addChangeFlags(downCmd, &down)
	c.AddCommand(upCmd, installCmd, statusCmd, kubeconfigCmd, downCmd)
	return c
}
