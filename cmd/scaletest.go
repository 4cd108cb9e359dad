package cmd

import (
	"errors"
	"fmt"
	"slices"

	"github.com/labctl/labctl/internal/kube"
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/scaletest"
)

func newScaleTestCmd(g *Globals) *cobra.Command {
	var change changeFlags
	var out, scenario, chart string
	c := &cobra.Command{
		Use:   "scale-test CLUSTER",
		Short: "Prove and time scale-up 1→3, scale-down to 0 and scale-from-zero",
		Long: `Deploy the "inflate" workload (pause pods with the requests in
scaleTest.workload) into namespace labctl-scale-test of the workload
cluster, change its size per phase and watch the autoscaler, Cluster API
and the nodes react: pods and Nodes in the workload cluster, the
MachineDeployment, MachineSets and Machines in the management cluster.

Phases: up (from 1 worker to 3: inflate grows from 1 pod to as many as
3 workers hold, 5 for 4-vCPU workers and 1500m pods), down (remove the
workload until the workers are gone) and from-zero (1 pod on a cluster
with no workers).
Each is timed against scaleTest.timeouts; a failed phase says where its
timeline stopped. The workload is always removed, also on Ctrl-C.`,
		Example: "  labctl scale-test lab1\n  labctl scale-test lab1 --scenario from-zero -o json --chart lab1.png",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if !slices.Contains(scaletest.Scenarios, scenario) {
				return usageError{fmt.Errorf("--scenario %q: must be one of up, down, from-zero, all", scenario)}
			}
			name := args[0]
			lab, _, err := config.Load(cmd.Context(), g.configRequest())
			if err != nil {
				return err
			}
			if _, err := cluster.Render(lab, name); err != nil {
				return err
			}
			c, err := lab.Cluster(name)
			if err != nil {
				return err
			}
			so := scaletest.Options{
				IO: g.IO, Cluster: name, Config: lab.ScaleTest, Scenario: scenario, Chart: chart,
				MgmtNamespace: clusterapi.Namespace(name), MachineDeployment: clusterapi.MachineDeploymentName(name),
				PodsPerWorker: scaletest.PodsPerWorker(c.Workers.Size.CPUs, lab.ScaleTest.Workload),
			}
			if change.DryRun {
				lines, err := scaletest.Plan(so)
				if err != nil {
					return err
				}
				fmt.Fprintln(g.IO.Out, "scale-test would:")
				for _, l := range lines {
					fmt.Fprintln(g.IO.Out, "  "+l)
				}
				return nil
			}
			o, err := g.clusterOptions(cmd.Context(), name, false, change)
			if err != nil {
				return err
			}
			kc, err := cluster.Kubeconfig(cmd.Context(), o)
			if err != nil {
				return err
			}
			wl, err := kube.RESTConfigFromKubeconfig(kc)
			if err != nil {
				return fmt.Errorf("cluster %s: reading its kubeconfig secret: %w", name, err)
			}
			so.Mgmt, so.Workload = o.Mgmt.RESTConfig(), wl
			rep, err := scaletest.Run(cmd.Context(), so)
			if rep != nil && len(rep.Phases) > 0 {
				if perr := g.IO.Print(out, rep, scaletest.Text(g.IO, rep)); perr != nil {
					return errors.Join(err, perr)
				}
			}
			return err
		},
	}
	c.Flags().StringVar(&scenario, "scenario", "all", "which phase to run: up, down, from-zero or all")
	c.Flags().StringVar(&chart, "chart", "", "write a chart of Nodes, pending pods and MachineDeployment replicas to this .svg or .png file")
	addChangeFlags(c, &change)
	addOutputFlag(c, &out)
	return c
}
