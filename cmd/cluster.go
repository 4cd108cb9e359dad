package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
)

func newClusterCmd(f *cmdutil.Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "cluster",
		Short: "Create, scale and delete workload clusters",
		Long: `Workload clusters are Cluster API objects in the management cluster,
rendered from lab.yaml: a kubeadm control plane behind a kube-vip VIP,
Cilium installed by Helm, and an autoscaled worker MachineDeployment that
scales from zero. Each cluster gets its own namespace and its own
cluster-autoscaler.`,
		Example: "  labctl cluster create lab1\n  labctl cluster list",
	}
	c.AddCommand(newClusterCreateCmd(f, nil), newClusterScaleCmd(f, nil), newClusterUpgradeCmd(f, nil), newClusterDeleteCmd(f, nil),
		newClusterListCmd(f, nil), newClusterDescribeCmd(f, nil), newClusterKubeconfigCmd(f, nil))
	return c
}
