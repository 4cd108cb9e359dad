package cmd

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/scaletest"
)

func newScaleTestCmd(f *cmdutil.Factory) *cobra.Command {
	var dryRun bool
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
timeline stopped. The workload is always removed, also on Ctrl-C.

--dry-run prints the plan (-o json|yaml as data) and needs no cluster.`,
		Example:           "  labctl scale-test lab1\n  labctl scale-test lab1 --dry-run -o json\n  labctl scale-test lab1 --scenario from-zero -o json --chart lab1.png",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: labNames(f, clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if !slices.Contains(scaletest.Scenarios, scenario) {
				return usageError{fmt.Errorf("--scenario %q: must be one of up, down, from-zero, all", scenario)}
			}
			if chart != "" {
				if err := scaletest.CheckChart(chart); err != nil {
					return usageError{err}
				}
			}
			lab, _, err := f.Lab(cmd.Context())
			if err != nil {
				return err
			}
			return scaletest.Command(cmd.Context(), scaletest.CommandOptions{
				IO: f.IO, Lab: lab, Cluster: args[0], Scenario: scenario, Chart: chart, Output: out,
				DryRun: dryRun, Mgmt: f.Mgmt, Workload: f.Workload,
			})
		},
	}
	c.Flags().StringVar(&scenario, "scenario", "all", "which phase to run: up, down, from-zero or all")
	_ = c.RegisterFlagCompletionFunc("scenario", cobra.FixedCompletions(scaletest.Scenarios, cobra.ShellCompDirectiveNoFileComp))
	c.Flags().StringVar(&chart, "chart", "", "write a chart of Nodes, pending pods and MachineDeployment replicas to this .svg or .png file")
	addDryRunFlag(c, &dryRun)
	addOutputFlag(c, &out)
	return c
}
