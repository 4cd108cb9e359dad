package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
)

// clusterOptions loads lab.yaml, checks the cluster is in it (when named)
// and connects to the management cluster.
func (g *Globals) clusterOptions(ctx context.Context, name string, needCluster bool, f changeFlags) (cluster.Options, error) {
	lab, _, err := config.Load(ctx, g.configRequest())
	if err != nil {
		return cluster.Options{}, err
	}
	if needCluster {
		if _, err := cluster.Render(lab, name); err != nil {
			return cluster.Options{}, err
		}
	}
	km, err := kube.MgmtKubeconfig(g.Kubeconfig, lab.Metadata.Name)
	if err != nil {
		return cluster.Options{}, err
	}
	if km.Note != "" {
		fmt.Fprintln(g.IO.Err, km.Note)
	}
	mgmt, err := km.Connect()
	switch {
	case err != nil && f.DryRun && needCluster:
		return cluster.Options{}, fmt.Errorf("the dry run compares with the management cluster, so it needs one: %w; 'labctl cluster create %s --dry-run -o yaml' prints the objects without one", err, name)
	case err != nil && f.DryRun:
		return cluster.Options{}, fmt.Errorf("the dry run reads the cluster from the management cluster, so it needs one: %w", err)
	case err != nil:
		return cluster.Options{}, err
	}
	return cluster.Options{IO: g.IO, Lab: lab, Name: name, Mgmt: mgmt, DryRun: f.DryRun, Verbose: g.Verbose}, nil
}

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
	var listOut string
	var createOut string
	createCmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a workload cluster from lab.yaml and wait until it is usable",
		Long: `Apply the cluster's Cluster API objects (server-side apply, field manager
labctl), wait until the infrastructure is provisioned, the control plane is
initialized and the kubeconfig secret exists, write the kubeconfig (mode
0600) to $XDG_CONFIG_HOME/labctl/<lab>/<cluster>.kubeconfig, install Cilium
into the cluster with Helm (ipam.mode kubernetes, k8sServiceHost the VIP),
and start the cluster's cluster-autoscaler. Re-running changes nothing that is already
right, and never touches the worker count the autoscaler chose.

--dry-run -o yaml prints every object without a management cluster.`,
		Example: "  labctl cluster create lab1\n  labctl cluster create lab1 --dry-run\n  labctl cluster create lab1 --dry-run -o yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if createOut == "yaml" || createOut == "json" {
				if !create.DryRun {
					return usageError{errors.New("-o yaml/json prints the objects; use it with --dry-run")}
				}
				lab, _, err := config.Load(cmd.Context(), g.configRequest())
				if err != nil {
					return err
				}
				return cluster.PrintObjects(g.IO, lab, args[0], createOut)
			}
			o, err := g.clusterOptions(cmd.Context(), args[0], true, create)
			if err != nil {
				return err
			}
			return cluster.Create(cmd.Context(), o)
		},
	}
	addChangeFlags(createCmd, &create)
	createCmd.Flags().StringVarP(&createOut, "output", "o", "", "with --dry-run: print the objects as yaml or json instead of the plan")
	var minW, maxW, replicas int
	scaleCmd := &cobra.Command{
		Use:   "scale NAME",
		Short: "Change a cluster's worker bounds (the autoscaler picks the count)",
		Long: `Change the autoscaler's bounds of an autoscaled worker pool (--min, --max),
or the count of a fixed pool (--replicas). Also change lab.yaml, or the
next 'cluster create' sets the bounds written there again.`,
		Example: "  labctl cluster scale lab1 --min 0 --max 5",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := g.clusterOptions(cmd.Context(), args[0], false, scale)
			if err != nil {
				return err
			}
			so := cluster.ScaleOptions{Options: o}
			if cmd.Flags().Changed("min") {
				so.Min = &minW
			}
			if cmd.Flags().Changed("max") {
				so.Max = &maxW
			}
			if cmd.Flags().Changed("replicas") {
				so.Replicas = &replicas
			}
			return cluster.Scale(cmd.Context(), so)
		},
	}
	scaleCmd.Flags().IntVar(&minW, "min", 0, "autoscaler minimum workers")
	scaleCmd.Flags().IntVar(&maxW, "max", 0, "autoscaler maximum workers")
	scaleCmd.Flags().IntVar(&replicas, "replicas", 0, "worker count of a pool that is not autoscaled")
	addChangeFlags(scaleCmd, &scale)
	deleteCmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a workload cluster and its VMs",
		Long: `Stop the cluster's autoscaler, delete its Cluster object and wait until
Cluster API has removed its machines. Asks first unless --yes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := g.clusterOptions(cmd.Context(), args[0], false, del)
			if err != nil {
				return err
			}
			return cluster.Delete(cmd.Context(), cluster.DeleteOptions{Options: o, Yes: del.Yes})
		},
	}
	addChangeFlags(deleteCmd, &del)
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List workload clusters and their phase",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(listOut); err != nil {
				return err
			}
			o, err := g.clusterOptions(cmd.Context(), "", false, changeFlags{})
			if err != nil {
				return err
			}
			list, err := cluster.List(cmd.Context(), o)
			if err != nil {
				return err
			}
			return g.IO.Print(listOut, list, func(w io.Writer) error { return o.ListText(w, list) })
		},
	}
	addOutputFlag(listCmd, &listOut)
	var describeOut string
	describeCmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a cluster's object tree and conditions, like clusterctl describe",
		Long: `Show the Cluster as clusterctl describe cluster does, with clusterctl's own
object tree: the Cluster, its infrastructure, the control plane and its
Machines, the worker MachineDeployments and their Machines, each with its
Ready (or Available) condition: status, reason, since and message. labctl
adds the cluster-autoscaler Deployment and a DETAILS column (replicas,
autoscaler bounds, machine phase and node). -o json|yaml prints the same
tree. It reads only; no secret is printed.`,
		Example: "  labctl cluster describe lab1\n  labctl cluster describe lab1 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(describeOut); err != nil {
				return err
			}
			o, err := g.clusterOptions(cmd.Context(), args[0], false, changeFlags{})
			if err != nil {
				return err
			}
			d, err := cluster.Describe(cmd.Context(), o)
			if err != nil {
				return err
			}
			return g.IO.Print(describeOut, d, func(w io.Writer) error { return cluster.DescribeText(g.IO, w, d) })
		},
	}
	addOutputFlag(describeCmd, &describeOut)
	var export kube.ExportOptions
	kubeconfigCmd := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print a workload cluster's kubeconfig, write it to a file, or merge it",
		Long: `Print the cluster's admin kubeconfig (from the <cluster>-kubeconfig secret
Cluster API keeps) on stdout, or write it with mode 0600 to the file --write
names (never over an existing file without --force), or --merge it into
~/.kube/config (or the file kubectl writes to under $KUBECONFIG) as context
labctl-<lab>-<cluster>, made current; the other contexts stay.`,
		Example: "  labctl cluster kubeconfig lab1 > lab1.kubeconfig\n  labctl cluster kubeconfig lab1 --write ~/.kube/lab1\n  labctl cluster kubeconfig lab1 --merge && kubectl get nodes",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := g.clusterOptions(cmd.Context(), args[0], false, changeFlags{})
			if err != nil {
				return err
			}
			return cluster.ExportKubeconfig(cmd.Context(), o, export)
		},
	}
	addKubeconfigExportFlags(kubeconfigCmd, &export)
	// --file was this command's name for --write; it overwrote files.
	kubeconfigCmd.Flags().StringVarP(&export.Write, "file", "f", "", "")
	_ = kubeconfigCmd.Flags().MarkDeprecated("file", "use --write (it never overwrites without --force)")
	c.AddCommand(createCmd, scaleCmd, deleteCmd, listCmd, describeCmd, kubeconfigCmd)
	return c
}
