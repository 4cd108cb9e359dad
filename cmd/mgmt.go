package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
)

func newMgmtCmd(f *cmdutil.Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "mgmt",
		Short: "Create and run the k3s management cluster",
		Long: `The management cluster is a k3s VM that runs cert-manager, the Cluster API
operator and providers, and one cluster-autoscaler per workload cluster.
It must run permanently, which is why it is a VM and not kind.

Its kubeconfig is stored with mode 0600 at
$XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig.`,
		Example: "  labctl mgmt up\n  labctl mgmt status\n  labctl mgmt backup lab.age",
	}
	c.AddCommand(newMgmtUpCmd(f, nil), newMgmtInstallCmd(f, nil), newMgmtUpgradeCmd(f, nil), newMgmtStatusCmd(f, nil), newMgmtKubeconfigCmd(f, nil),
		newMgmtDownCmd(f, nil), newMgmtBackupCmd(f, nil), newMgmtRestoreCmd(f, nil))
	return c
}
