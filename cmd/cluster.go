package cmd

import "github.com/spf13/cobra"

func newClusterCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "cluster",
		Short: "Create, scale and delete workload clusters",
		Long: `Workload clusters are Cluster API objects in the management cluster,
rendered from lab.yaml: a kubeadm control plane behind a kube-vip VIP,
Cilium installed by Helm, and an autoscaled worker MachineDeployment that
scales from zero. Each cluster gets its own namespace and its own
cluster-autoscaler.`,
	}
	var create, scale, del changeFlags
	var listOut, describeOut string
	createCmd := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create a workload cluster from lab.yaml and wait until it is usable",
		Example: "  labctl cluster create lab1\n  labctl cluster create lab1 --dry-run",
		Args:    cobra.ExactArgs(1),
		RunE:    notImplemented,
	}
	addChangeFlags(createCmd, &create)
	scaleCmd := &cobra.Command{
		Use:     "scale NAME",
		Short:   "Change a cluster's worker bounds (the autoscaler picks the count)",
		Example: "  labctl cluster scale lab1 --min 0 --max 5",
		Args:    cobra.ExactArgs(1),
		RunE:    notImplemented,
	}
	addChangeFlags(scaleCmd, &scale)
	deleteCmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a workload cluster and its VMs",
		Args:  cobra.ExactArgs(1),
		RunE:  notImplemented,
	}
	addChangeFlags(deleteCmd, &del)
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List workload clusters and their phase",
		Args:  cobra.NoArgs,
		RunE:  notImplemented,
	}
	addOutputFlag(listCmd, &listOut)
	describeCmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a cluster's control plane, machines and autoscaler",
		Args:  cobra.ExactArgs(1),
		RunE:  notImplemented,
	}
	addOutputFlag(describeCmd, &describeOut)
	kubeconfigCmd := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print a workload cluster's kubeconfig, or write it to a file",
		Args:  cobra.ExactArgs(1),
		RunE:  notImplemented,
	}
	c.AddCommand(createCmd, scaleCmd, deleteCmd, listCmd, describeCmd, kubeconfigCmd)
	return c
}
