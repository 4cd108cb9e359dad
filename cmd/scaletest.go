package cmd

import "github.com/spf13/cobra"

func newScaleTestCmd(g *Globals) *cobra.Command {
	var change changeFlags
	var out, scenario string
	c := &cobra.Command{
		Use:   "scale-test CLUSTER",
		Short: "Prove and time scale-up 1→3, scale-down to 0 and scale-from-zero",
		Long: `Deploy the "inflate" workload (pause pods with the requests in
scaleTest.workload), change its replicas and watch the autoscaler, Cluster
API and the nodes react. Reports each phase's time and where it stopped if it
failed. The workload is always removed, also on Ctrl-C.`,
		Example: "  labctl scale-test lab1\n  labctl scale-test lab1 --scenario from-zero -o json",
		Args:    cobra.ExactArgs(1),
		RunE:    notImplemented,
	}
	c.Flags().StringVar(&scenario, "scenario", "all", "which phase to run: up, down, from-zero or all")
	addChangeFlags(c, &change)
	addOutputFlag(c, &out)
	return c
}
