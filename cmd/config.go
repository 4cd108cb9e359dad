package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
)

func newConfigCmd(f *cmdutil.Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Write, check and show lab.yaml",
		Long: `lab.yaml (apiVersion labctl.dev/v1alpha1, kind Lab) describes the whole lab:
hypervisors, network, the management VM, node images, workload clusters and
scale-test settings. labctl reads it from --config/-c, else LABCTL_CONFIG,
else ./lab.yaml, else its built-in one-machine example (local-kvm).

Secrets never go in the file: it names the environment variable or file that
holds each one.`,
		Example: "  labctl config init\n  labctl config validate",
	}
	c.AddCommand(newConfigInitCmd(f, nil), newConfigValidateCmd(f, nil), newConfigViewCmd(f, nil))
	return c
}
