package cmd

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/scaletest"
)

// newScaleTestCmd hands its run scaletest.CommandOptions with the command
// line's fields set; the run adds what it reaches.
func newScaleTestCmd(f *cmdutil.Factory, runF runFunc[scaletest.CommandOptions]) *cobra.Command {
	var o scaletest.CommandOptions
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *scaletest.CommandOptions) error {
		o.IO, o.Lab, o.Mgmt, o.Workload = f.IO, lab, f.Mgmt, f.Workload
		return scaletest.Command(ctx, *o)
	}))
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
			o.Cluster = args[0]
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			if !slices.Contains(scaletest.Scenarios, o.Scenario) {
				return usageError{fmt.Errorf("--scenario %q: must be one of up, down, from-zero, all", o.Scenario)}
			}
			if o.Chart != "" {
				if err := scaletest.CheckChart(o.Chart, o.DryRun); err != nil {
					return usageError{err}
				}
			}
			return run(cmd.Context(), &o)
		},
	}
	c.Flags().StringVar(&o.Scenario, "scenario", "all", "which phase to run: up, down, from-zero or all")
	_ = c.RegisterFlagCompletionFunc("scenario", cobra.FixedCompletions(scaletest.Scenarios, cobra.ShellCompDirectiveNoFileComp))
	c.Flags().StringVar(&o.Chart, "chart", "", "write a chart of Nodes, pending pods and MachineDeployment replicas to this .svg or .png file")
	addDryRunFlag(c, &o.DryRun)
	addOutputFlag(c, &o.Output)
	return c
}
