//go:build provider

package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/provider/libvirt/controller"
)

// providerCmds are the commands of the image's build (-tags provider):
// 'provider', the Cluster API providers labctl itself is. They are left
// out of the CLI's build because the provider links controller-runtime's
// manager and Cluster API's util, whose package init (Prometheus
// collectors among them) every CLI command would pay at start
// (docs/libvirt-provider.md, "Running it").
func providerCmds(f *cmdutil.Factory) []*cobra.Command {
	return []*cobra.Command{newProviderCmd(f)}
}

// newProviderCmd groups the Cluster API providers labctl itself is. It is
// hidden: the provider's Deployment runs it, people do not.
func newProviderCmd(f *cmdutil.Factory) *cobra.Command {
	c := &cobra.Command{
		Use:    "provider",
		Short:  "Run one of labctl's Cluster API providers (what its Deployment runs)",
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	c.AddCommand(newProviderLibvirtCmd(f, nil))
	return c
}

// newProviderLibvirtCmd hands its run controller.Options with the command
// line's fields set (Kubeconfig from --kubeconfig); the run adds the log.
func newProviderLibvirtCmd(f *cmdutil.Factory, runF runFunc[controller.Options]) *cobra.Command {
	var o controller.Options
	run := orRun(runF, func(ctx context.Context, o *controller.Options) error {
		o.Log = f.IO.Err
		return controller.Run(ctx, *o)
	})
	c := &cobra.Command{
		Use:   "libvirt",
		Short: "Run the Cluster API infrastructure provider for libvirt hosts",
		Long: `Run labctl's Cluster API infrastructure provider for libvirt hosts
(LibvirtCluster, LibvirtMachine, LibvirtMachineTemplate in group
infrastructure.labctl.dev) against the management cluster, until
interrupted. Its Deployment runs this; see docs/libvirt-provider.md.`,
		Example: "  labctl provider libvirt --kubeconfig mgmt.kubeconfig",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Kubeconfig = f.Settings.Kubeconfig
			return run(cmd.Context(), &o)
		},
	}
	fl := c.Flags()
	fl.StringVar(&o.Namespace, "namespace", "", "watch only this namespace (default: all)")
	fl.StringVar(&o.HealthAddr, "health-addr", ":9440", "where the health probes (/healthz, /readyz) listen")
	fl.BoolVar(&o.LeaderElect, "leader-elect", false, "elect one active replica among several")
	fl.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader lease (default: the pod's)")
	fl.IntVar(&o.Concurrency, "concurrency", 4, "LibvirtMachines reconciled at once")
	return c
}
