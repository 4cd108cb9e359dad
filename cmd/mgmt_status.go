package cmd

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/mgmt"
)

// newMgmtStatusCmd hands its run mgmt.StatusOptions with the command
// line's fields set; the run adds what it reaches.
func newMgmtStatusCmd(f *cmdutil.Factory, runF runFunc[mgmt.StatusOptions]) *cobra.Command {
	var o mgmt.StatusOptions
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *mgmt.StatusOptions) error {
		o.IO, o.Lab, o.Mgmt, o.Verbose = f.IO, lab, f.Mgmt, f.Settings.Verbose
		_, err := mgmt.Status(ctx, *o)
		if errors.Is(err, mgmt.ErrNotReady) {
			return codeError{exitError}
		}
		return err
	}))
	c := &cobra.Command{
		Use:   "status",
		Short: "Show each management component: wanted and installed version, readiness",
		Long: `Read each component of the management stack back from the cluster: the
version labctl wants, the version installed (the Helm release's chart version,
the Provider's status.installedVersion, the RBAC's version label), whether it
is ready, and why not. Works for charts installed by k3s's helm-controller and
by the Helm SDK alike. Only reads; needs no secret.

Exits 0 when every component is ready, 1 when one is not.`,
		Example: `  labctl mgmt status
  labctl mgmt status --kubeconfig ~/.kube/other -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return run(cmd.Context(), &o)
		},
	}
	addOutputFlag(c, &o.Output)
	readsOnly(c)
	return c
}
