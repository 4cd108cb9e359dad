package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
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
	c.AddCommand(newClusterCreateCmd(f), newClusterScaleCmd(f), newClusterUpgradeCmd(f), newClusterDeleteCmd(f),
		newClusterListCmd(f), newClusterDescribeCmd(f), newClusterKubeconfigCmd(f))
	return c
}

// oneCluster is the RunE of a cluster verb that takes one NAME: it builds
// the shared options through the factory (with inLab the name must be in
// lab.yaml; dryRun, when not nil, is the verb's --dry-run) and hands them
// to run.
func oneCluster(f *cmdutil.Factory, inLab bool, dryRun *bool, run func(cmd *cobra.Command, o cluster.Options) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		o, err := f.ClusterOptions(cmd.Context(), args[0], inLab, dryRun != nil && *dryRun)
		if err != nil {
			return err
		}
		return run(cmd, o)
	}
}
