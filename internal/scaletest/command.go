package scaletest

import (
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
)

// CommandOptions are the inputs of 'labctl scale-test'.
type CommandOptions struct {
	IO       *ui.IO
	Lab      *config.Lab
	Cluster  string
	Scenario string
	Chart    string
	Output   string // text, json or yaml
	DryRun   bool
	// Mgmt and Workload reach the management cluster and the workload
	// cluster (the command factory's); a dry run calls neither.
	Mgmt     func(ctx context.Context) (*kube.Client, error)
	Workload func(ctx context.Context, cluster string) (*rest.Config, error)
}

// PlanReport is what 'scale-test --dry-run' prints; -o json prints it whole.
type PlanReport struct {
	Cluster  string   `json:"cluster"`
	Scenario string   `json:"scenario"`
	Steps    []string `json:"steps"`
}

// Command checks the cluster is in lab.yaml, then prints the plan (dry
// run) or runs the scenario and prints the report. Only the cluster's
// entry in lab.yaml is read: nothing is rendered, so no SSH key is needed.
func Command(ctx context.Context, o CommandOptions) error {
	c, err := o.Lab.Cluster(o.Cluster)
	if err != nil {
		return err
	}
	// The cluster's first pool: the one config checks the workload against.
	pool := c.Pools[0]
	so := Options{
		IO: o.IO, Cluster: c.Name, Config: o.Lab.ScaleTest, Scenario: o.Scenario, Chart: o.Chart,
		MgmtNamespace: clusterapi.Namespace(c.Name), MachineDeployment: clusterapi.PoolMachineDeploymentName(c.Name, pool.Name),
		PodsPerWorker: PodsPerWorker(pool.Size.CPUs, o.Lab.ScaleTest.Workload), Pool: pool.Name,
	}
	if o.DryRun {
		lines, err := Plan(so)
		if err != nil {
			return err
		}
		p := PlanReport{Cluster: c.Name, Scenario: o.Scenario, Steps: lines}
		return o.IO.Print(o.Output, p, func(w io.Writer) error {
			fmt.Fprintln(w, "scale-test would:")
			for _, l := range lines {
				fmt.Fprintln(w, "  "+l)
			}
			return nil
		})
	}
	mc, err := o.Mgmt(ctx)
	if err != nil {
		return err
	}
	wl, err := o.Workload(ctx, c.Name)
	if err != nil {
		return err
	}
	so.Mgmt, so.Workload = mc.RESTConfig(), wl
	rep, err := Run(ctx, so)
	if rep != nil && len(rep.Phases) > 0 {
		if perr := o.IO.Print(o.Output, rep, Text(o.IO, rep)); perr != nil {
			return errors.Join(err, perr)
		}
	}
	return err
}
